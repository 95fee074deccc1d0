//! Validated identifiers. An id that reaches Redis has been parsed here, so a
//! key can never be built from arbitrary user text.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

use crate::error::ValidationError;

/// Defines an id made of a fixed prefix and a lowercase ULID, which sorts by
/// creation time.
macro_rules! prefixed_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub const PREFIX: &'static str = $prefix;
            /// What [`Self::parse`] accepts, as a regular expression: the
            /// prefix and a lowercase ULID (Crockford base32, at most 7ff…).
            pub const PATTERN: &'static str = concat!("^", $prefix, "[0-7][0-9a-hjkmnp-tv-z]{25}$");

            /// A fresh id.
            pub fn generate() -> Self {
                Self(format!("{}{}", $prefix, ulid::Ulid::new().to_string().to_lowercase()))
            }

            /// Parses an id as users send it.
            pub fn parse(text: &str) -> Result<Self, ValidationError> {
                let valid = text
                    .strip_prefix($prefix)
                    .is_some_and(|rest| rest.len() == 26 && ulid::Ulid::from_string(rest).is_ok() && rest == rest.to_lowercase());
                if valid {
                    Ok(Self(text.to_owned()))
                } else {
                    Err(ValidationError::new(concat!("not a valid id: expected ", $prefix, " followed by 26 lowercase characters")))
                }
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The lowest id made at `ms` (epoch ms): ids sort by creation
            /// time, so the ids below it are exactly those made before.
            pub fn first_at(ms: u64) -> String {
                format!("{}{}", $prefix, ulid::Ulid::from_parts(ms, 0).to_string().to_lowercase())
            }
        }

        #[cfg(feature = "openapi")]
        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                utoipa::openapi::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .pattern(Some(Self::PATTERN))
                    .description(Some(concat!("`", $prefix, "` and a lowercase ULID")))
                    .into()
            }
        }

        #[cfg(feature = "openapi")]
        impl utoipa::ToSchema for $name {}

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                Self::parse(&text).map_err(serde::de::Error::custom)
            }
        }
    };
}

prefixed_id!(
    /// A task: `tsk_` and a ULID.
    TaskId,
    "tsk_"
);
prefixed_id!(
    /// A batch of tasks: `bat_` and a ULID.
    BatchId,
    "bat_"
);
prefixed_id!(
    /// A schedule: `sch_` and a ULID.
    ScheduleId,
    "sch_"
);

prefixed_id!(
    /// A webhook endpoint: `whk_` and a ULID.
    WebhookId,
    "whk_"
);

prefixed_id!(
    /// A webhook message to one endpoint: `msg_` and a ULID, the same on
    /// every retry (the `webhook-id` header).
    MessageId,
    "msg_"
);

/// Whether `text` is a well-formed id of any kind (a task's, a batch's, a
/// schedule's, a webhook's or a message's): such an id in a path meant for
/// another kind names nothing there, rather than being malformed.
pub fn is_any_id(text: &str) -> bool {
    TaskId::parse(text).is_ok()
        || BatchId::parse(text).is_ok()
        || ScheduleId::parse(text).is_ok()
        || WebhookId::parse(text).is_ok()
        || MessageId::parse(text).is_ok()
}

impl MessageId {
    /// The id of the message that reports one event to one endpoint: its
    /// time is the event's, the rest a digest of what it reports, so the
    /// same event read twice makes the same message.
    pub fn derived(ms: u64, what: &str) -> Self {
        let digest = blake3::hash(what.as_bytes());
        let mut random = [0u8; 16];
        random[6..].copy_from_slice(&digest.as_bytes()[..10]);
        let ulid = ulid::Ulid::from_parts(ms, u128::from_be_bytes(random));
        Self(format!("msg_{}", ulid.to_string().to_lowercase()))
    }
}

/// A tenant: 1–64 of `a-z 0-9 - _`. Every task belongs to exactly one.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct TenantId(String);

impl TenantId {
    pub fn parse(text: &str) -> Result<Self, ValidationError> {
        let valid = !text.is_empty()
            && text.len() <= 64
            && text.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
        if valid {
            Ok(Self(text.to_owned()))
        } else {
            Err(ValidationError::new("a tenant must be 1-64 of a-z 0-9 - _"))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Every id the document's pattern allows parses.
        #[test]
        fn every_id_the_pattern_allows_parses(id in proptest::string::string_regex(TaskId::PATTERN.trim_start_matches('^').trim_end_matches('$')).expect("regex")) {
            prop_assert!(TaskId::parse(&id).is_ok(), "{}", id);
        }
    }

    #[test]
    fn generated_ids_match_the_pattern() {
        let pattern = TaskId::PATTERN;
        for _ in 0..100 {
            let id = TaskId::generate();
            let rest = id.as_str().strip_prefix("tsk_").expect("prefix");
            assert!(pattern.starts_with("^tsk_[0-7]") && rest.len() == 26, "{id}");
            assert!(rest.chars().all(|c| c.is_ascii_digit() || c.is_ascii_lowercase() && !"ilou".contains(c)), "{id}");
        }
    }

    #[test]
    fn generated_ids_parse_back() {
        let id = TaskId::generate();
        assert!(id.as_str().starts_with("tsk_"));
        assert_eq!(TaskId::parse(id.as_str()).expect("parses"), id);
    }

    #[test]
    fn ids_of_another_kind_or_shape_are_refused() {
        let batch = BatchId::generate();
        assert!(TaskId::parse(batch.as_str()).is_err());
        assert!(TaskId::parse("tsk_").is_err());
        assert!(TaskId::parse("tsk_../../etc/passwd0000000000").is_err());
        assert!(TaskId::parse(&TaskId::generate().as_str().to_uppercase()).is_err());
        assert!(TaskId::parse("tsk_{evil}").is_err());
    }

    #[test]
    fn tenants_are_plain_names() {
        assert!(TenantId::parse("acme-1").is_ok());
        assert!(TenantId::parse("").is_err());
        assert!(TenantId::parse("Acme").is_err());
        assert!(TenantId::parse("a:b").is_err());
    }
}
