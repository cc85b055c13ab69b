//! Unit tests of the timeline.
