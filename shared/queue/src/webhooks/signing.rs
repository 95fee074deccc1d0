//! Standard Webhooks signatures: `v1,<base64 HMAC-SHA256(key, id.timestamp.body)>`,
//! where the key is the bytes of the base64 after `whsec_`.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use rand::RngCore;
use sha2::Sha256;

/// What every secret starts with.
pub const SECRET_PREFIX: &str = "whsec_";
/// Random bytes in a new secret.
const SECRET_BYTES: usize = 24;

/// A new random secret, `whsec_<base64>`.
pub fn new_secret() -> String {
    let mut key = [0u8; SECRET_BYTES];
    rand::rng().fill_bytes(&mut key);
    format!("{SECRET_PREFIX}{}", STANDARD.encode(key))
}

/// The signature of one message under `secret`, `v1,<base64>`; `None` when
/// the secret is malformed (it never is when made by [`new_secret`]).
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
    }

    #[test]
    fn new_secrets_differ_and_sign() {
        let (a, b) = (new_secret(), new_secret());
        assert_ne!(a, b);
        assert!(sign(&a, "m", 1, b"x").is_some());
        assert_eq!(signature_header([a.as_str(), b.as_str()], "m", 1, b"x").split(' ').count(), 2);
        assert!(sign("nope", "m", 1, b"x").is_none());
    }
}
