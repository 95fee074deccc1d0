//! URLs signed for one file (E2B's presigned `/files` URLs): a client that
//! holds a sandbox's access token hands out a URL that reads or writes one
//! path as one user, until an expiry if it names one, without the token.
//! The signature is `v1_` and the unpadded base64 of the SHA-256 of
//! `<path>:<read|write>:<user>:<token>[:<expiration>]`, as the official
//! SDKs compute it.
//!
//! Invariant: a signature opens only the path, operation and user it was
//! made for, with the token of the sandbox it names, before its expiry
//! (`tests::a_signature_opens_only_what_it_was_made_for`, and the SDKs'
//! URLs in `sandboxd::the_official_python_e2b_sdks_drive_a_sandboxd_desktop`).

use base64::Engine;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// What a `/files` request asks to do, and the signature it carries.
pub(super) struct FileAccess<'a> {
    pub path: &'a str,
    /// `read` or `write`.
    pub operation: &'static str,
    /// The `username` query parameter; empty when it names none.
    pub user: &'a str,
    pub signature: Option<&'a str>,
    /// Unix seconds after which the signature no longer opens the file.
    pub expiration: Option<i64>,
}

impl FileAccess<'_> {
    /// Whether the request's signature was made with `token` for this
    /// access, and has not expired at `now` (Unix seconds).
    pub fn signed_with(&self, token: &str, now: i64) -> bool {
        let Some(signature) = self.signature else { return false };
        if self.expiration.is_some_and(|expiration| expiration < now) {
            return false;
        }
        let expected = signature_of(self.path, self.operation, self.user, token, self.expiration);
        expected.as_bytes().ct_eq(signature.as_bytes()).into()
    }
}

/// The signature of `path` for `operation` as `user` with `token`.
fn signature_of(path: &str, operation: &str, user: &str, token: &str, expiration: Option<i64>) -> String {
    let mut signed = format!("{path}:{operation}:{user}:{token}");
    if let Some(expiration) = expiration {
        signed.push_str(&format!(":{expiration}"));
    }
    let digest = Sha256::digest(signed.as_bytes());
    format!("v1_{}", base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access<'a>(signature: &'a str, expiration: Option<i64>) -> FileAccess<'a> {
        FileAccess { path: "notes/a.txt", operation: "read", user: "user", signature: Some(signature), expiration }
    }

    #[test]
    fn a_signature_opens_only_what_it_was_made_for() {
        let good = signature_of("notes/a.txt", "read", "user", "tok", None);
        assert!(access(&good, None).signed_with("tok", 0));
        assert!(!access(&good, None).signed_with("other", 0), "another sandbox's token");
        let write = signature_of("notes/a.txt", "write", "user", "tok", None);
        assert!(!access(&write, None).signed_with("tok", 0), "made for writing");
        let other_path = signature_of("notes/b.txt", "read", "user", "tok", None);
        assert!(!access(&other_path, None).signed_with("tok", 0), "made for another path");
        let expiring = signature_of("notes/a.txt", "read", "user", "tok", Some(100));
        assert!(access(&expiring, Some(100)).signed_with("tok", 99));
        assert!(!access(&expiring, Some(100)).signed_with("tok", 101), "expired");
        assert!(!access(&expiring, Some(200)).signed_with("tok", 99), "the expiry is signed too");
        assert!(!FileAccess { signature: None, ..access("", None) }.signed_with("tok", 0));
    }

    #[test]
    fn the_signature_is_the_sdks() {
        // sha256("p:read::t") in base64 without padding, as the E2B SDKs
        // compute it for a path read with no user.
        let digest = Sha256::digest(b"p:read::t");
        let expected = format!("v1_{}", base64::engine::general_purpose::STANDARD.encode(digest).trim_end_matches('='));
        assert_eq!(signature_of("p", "read", "", "t", None), expected);
    }
}
