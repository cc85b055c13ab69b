//! Tests: store_contract.
