//! Unit tests of the patch parser and chunk application.
