//! Standard Webhooks signatures: `v1,<base64 HMAC-SHA256(key, id.timestamp.body)>`,
//! where the key is the bytes of the base64 after `whsec_`. The fleet signs
//! its deliveries with [`signature_header`]; receivers (the CLI's
//! `webhooks listen`) check them with [`verify`].

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// What every secret starts with.
pub const SECRET_PREFIX: &str = "whsec_";

/// The signature of one message under `secret`, `v1,<base64>`; `None` when
/// the secret is malformed.
pub fn sign(secret: &str, msg_id: &str, timestamp: i64, body: &[u8]) -> Option<String> {
    let key = STANDARD.decode(secret.strip_prefix(SECRET_PREFIX)?).ok()?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).ok()?;
    mac.update(msg_id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    Some(format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes())))
}

/// The `webhook-signature` header: one signature per secret, space-separated.
pub fn signature_header<'a>(secrets: impl IntoIterator<Item = &'a str>, msg_id: &str, timestamp: i64, body: &[u8]) -> String {
    secrets.into_iter().filter_map(|s| sign(s, msg_id, timestamp, body)).collect::<Vec<_>>().join(" ")
}

/// Whether any signature of a `webhook-signature` header is the one
/// `secret` makes for this message.
pub fn verify(secret: &str, msg_id: &str, timestamp: i64, body: &[u8], header: &str) -> bool {
    let Some(expected) = sign(secret, msg_id, timestamp, body) else { return false };
    header.split(' ').any(|given| given == expected)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification.
    #[test]
    fn matches_the_specification_example() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body = br#"{"test": 2432232314}"#;
        let signature = sign(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body).expect("signs");
        assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        assert!(verify(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body, &format!("v1,other {signature}")));
    }

    #[test]
    fn a_changed_body_time_id_or_secret_does_not_verify() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let header = signature_header([secret], "msg_1", 10, b"{}");
        assert!(verify(secret, "msg_1", 10, b"{}", &header));
        assert!(!verify(secret, "msg_1", 10, b"{ }", &header));
        assert!(!verify(secret, "msg_1", 11, b"{}", &header));
        assert!(!verify(secret, "msg_2", 10, b"{}", &header));
        assert!(!verify("whsec_c2VjcmV0", "msg_1", 10, b"{}", &header));
        assert!(!verify("nope", "msg_1", 10, b"{}", &header));
    }
}
