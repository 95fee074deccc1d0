//! Standard Webhooks secrets and signatures: a new endpoint's random
//! secret here; signing and checking are the types crate's
//! ([`flotilla_types::signing`]), which receivers use too.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use rand::RngCore;

pub use flotilla_types::signing::{sign, signature_header, verify, SECRET_PREFIX};

/// Random bytes in a new secret.
const SECRET_BYTES: usize = 24;

/// A new random secret, `whsec_<base64>`.
pub fn new_secret() -> String {
    let mut key = [0u8; SECRET_BYTES];
    rand::rng().fill_bytes(&mut key);
    format!("{SECRET_PREFIX}{}", STANDARD.encode(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_secrets_differ_and_sign() {
        let (a, b) = (new_secret(), new_secret());
        assert_ne!(a, b);
        assert!(sign(&a, "m", 1, b"x").is_some());
        assert_eq!(signature_header([a.as_str(), b.as_str()], "m", 1, b"x").split(' ').count(), 2);
        assert!(sign("nope", "m", 1, b"x").is_none());
    }
}
