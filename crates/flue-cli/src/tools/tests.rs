//! Unit tests of skill arguments and tool listings.

use pretty_assertions::assert_eq;
use serde_json::json;

use super::{parse_skill_args, schema_type};

#[test]
fn skill_args_are_json_when_they_parse_and_strings_otherwise() {
    let args = parse_skill_args(&[
        "file=src/login.py".to_owned(),
        "depth=3".to_owned(),
        "strict=true".to_owned(),
        "tags=[\"a\",\"b\"]".to_owned(),
        "note=a=b".to_owned(),
    ])
    .unwrap();
    assert_eq!(
        serde_json::to_value(&args).unwrap(),
        json!({"file": "src/login.py", "depth": 3, "strict": true, "tags": ["a", "b"], "note": "a=b"})
    );
    let err = parse_skill_args(&["file".to_owned()]).unwrap_err();
    assert!(err.to_string().contains("is not KEY=VALUE"), "{err}");
}

#[test]
fn schema_types_read_short() {
    assert_eq!(schema_type(&json!({"type": "string"})), "string");
    assert_eq!(
        schema_type(&json!({"type": ["integer", "null"]})),
        "integer or null"
    );
    assert_eq!(
        schema_type(&json!({"type": "array", "items": {"type": "string"}})),
        "array of string"
    );
    assert_eq!(schema_type(&json!({})), "any");
}
