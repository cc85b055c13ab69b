//! Signing and reading standing approvals.

use super::*;

fn key(byte: u8) -> ApprovalKey {
    ApprovalKey::from_bytes(&[byte; 32]).unwrap()
}

#[test]
fn the_mac_is_hmac_sha256_by_the_rfc_4231_vectors() {
    assert_eq!(
        hex::encode(hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
    assert_eq!(
        hex::encode(hmac_sha256(
            &[0xaa; 131],
            b"Test Using Larger Than Block-Size Key - Hash Key First"
        )),
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
    );
}

#[test]
fn a_lazy_key_is_made_only_to_sign() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let made = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&made);
    let lazy = ApprovalKey::lazy(Box::new(move |create| {
        if !create {
            return Ok(None);
        }
        counter.fetch_add(1, Ordering::SeqCst);
        Ok(Some(vec![9; 32]))
    }));
    let signed = grant(&key(9), "bash", "act_1").unwrap();
    let records = vec![Record::Rule(signed)];
    // Verifying makes no key: with none, nothing verifies.
    assert_eq!(approving(&records, Some(&lazy), "bash"), None);
    assert_eq!(made.load(Ordering::SeqCst), 0);
    let own = grant(&lazy, "bash", "act_2").unwrap();
    assert_eq!(made.load(Ordering::SeqCst), 1);
    assert!(approving(&[Record::Rule(own)], Some(&lazy), "bash").is_some());
    assert!(approving(&records, Some(&lazy), "bash").is_some());
}

#[test]
fn a_grant_signed_with_another_key_approves_nothing() {
    let records = vec![Record::Rule(grant(&key(1), "bash", "act_1").unwrap())];
    assert!(approving(&records, Some(&key(1)), "bash").is_some());
    assert!(approving(&records, Some(&key(1)), "write").is_none());
    assert_eq!(approving(&records, Some(&key(2)), "bash"), None);
    assert_eq!(approving(&records, None, "bash"), None);
    assert_eq!(
        standing_rules(&records, Some(&key(2)))[0].status,
        "unverified"
    );
}

#[test]
fn a_grant_whose_tool_was_edited_no_longer_verifies() {
    let mut rule = grant(&key(1), "read", "act_1").unwrap();
    "bash".clone_into(&mut rule.tool_name);
    assert_eq!(
        approving(&[Record::Rule(rule)], Some(&key(1)), "bash"),
        None
    );
}

#[test]
fn a_revocation_ends_the_rule() {
    let granted = grant(&key(1), "bash", "act_1").unwrap();
    let mut records = vec![Record::Rule(granted)];
    let listed = standing_rules(&records, Some(&key(1)));
    records.push(Record::Rule(revocation(&listed[0])));
    assert_eq!(approving(&records, Some(&key(1)), "bash"), None);
    assert_eq!(standing_rules(&records, Some(&key(1)))[0].status, "revoked");
}

#[test]
fn short_or_non_hex_keys_are_refused() {
    assert!(ApprovalKey::from_bytes(&[0; 31]).is_err());
    assert!(ApprovalKey::from_hex("zz").is_err());
    assert!(ApprovalKey::from_hex(&"ab".repeat(32)).is_ok());
}
