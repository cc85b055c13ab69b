//! Unit tests of the file tools helpers.
