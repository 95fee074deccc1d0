//! Request JSON read the way JSON Schema (and so the OpenAPI document) reads
//! it, before it is turned into a typed value: a number with a zero
//! fraction (`8428.0`) is the integer it equals, so an integer field takes
//! it; an object that names a key twice is refused, since which of the two
//! values counts would otherwise be a guess.

use std::fmt;

use serde::de::{Deserialize, Deserializer, Error, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Parses `bytes` as one JSON value.
pub fn parse(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let Read(value) = Read::deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// The number `f` stands for: an integer when it has no fraction and fits
/// one.
fn number(f: f64) -> Option<Number> {
    // 2^63 and 2^64, exactly representable.
    const I64_END: f64 = 9_223_372_036_854_775_808.0;
    const U64_END: f64 = 18_446_744_073_709_551_616.0;
    if f.fract() == 0.0 && (-I64_END..I64_END).contains(&f) {
        Some(Number::from(f as i64))
    } else if f.fract() == 0.0 && (0.0..U64_END).contains(&f) {
        Some(Number::from(f as u64))
    } else {
        Number::from_f64(f)
    }
}

/// A JSON value read by [`ReadVisitor`].
struct Read(Value);

impl<'de> Deserialize<'de> for Read {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ReadVisitor).map(Read)
    }
}

struct ReadVisitor;

impl<'de> Visitor<'de> for ReadVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: Error>(self, v: f64) -> Result<Value, E> {
        number(v).map(Value::Number).ok_or_else(|| E::custom("a number JSON cannot hold"))
    }

    fn visit_str<E: Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E: Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Read(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            // Checked before its value is read, as the object itself knows
            // every key read so far.
            if object.contains_key(&key) {
                return Err(A::Error::custom(format!("duplicate field `{key}`")));
            }
            let Read(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn integral_numbers_are_integers() {
        assert_eq!(
            parse(br#"{"a": 8428.0, "b": -3.0, "c": 1.5, "d": 1e3, "e": 1e300}"#).expect("json"),
            json!({
                "a": 8428, "b": -3, "c": 1.5, "d": 1000, "e": 1e300
            })
        );
        assert!(parse(br#"{"a": 8428.0}"#).expect("json")["a"].is_u64());
    }

    #[test]
    fn a_key_named_twice_is_refused() {
        let err = parse(br#"{"a": {"b": 1, "b": 2}}"#).expect_err("refused");
        assert!(err.to_string().contains("duplicate field `b`"), "{err}");
    }

    #[test]
    fn syntax_errors_and_trailing_text_are_refused() {
        assert!(parse(br#"{"a": "#).expect_err("refused").is_eof());
        assert!(parse(br#"{} {}"#).expect_err("refused").is_syntax());
    }
}
