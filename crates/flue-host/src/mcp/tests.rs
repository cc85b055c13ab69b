//! Unit tests of `${VAR}` expansion.

use pretty_assertions::assert_eq;

use super::expand;

fn lookup(name: &str) -> Option<String> {
    match name {
        "TOKEN" => Some("t0k".to_owned()),
        "EMPTY" => Some(String::new()),
        _ => None,
    }
}

#[test]
fn variables_are_replaced_and_other_dollars_kept() {
    let cases = [
        ("Bearer ${TOKEN}", "Bearer t0k"),
        ("${TOKEN}${TOKEN}", "t0kt0k"),
        ("[${EMPTY}]", "[]"),
        ("cost: $5 and $HOME", "cost: $5 and $HOME"),
        ("plain", "plain"),
    ];
    for (text, expected) in cases {
        assert_eq!(expand(text, lookup), Ok(expected.to_owned()), "{text}");
    }
}

#[test]
fn problems_name_the_variable_and_never_a_value() {
    assert_eq!(
        expand("Bearer ${MISSING}", lookup),
        Err("`${MISSING}` is not set: set MISSING in the environment or in .env".to_owned())
    );
    assert_eq!(
        expand("${TOKEN", lookup),
        Err("`${` without a closing `}`: write `${NAME}`".to_owned())
    );
    assert_eq!(
        expand("${1X}", lookup),
        Err("`${1X}` is not a variable name: use letters, digits and `_`".to_owned())
    );
}
