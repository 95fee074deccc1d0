//! JSON objects only where the contract has an object. serde's derived
//! `Deserialize` for a struct also takes an array (the fields by position),
//! so `"sandbox": [null, null, [1024, 768]]` would pass for a sandbox spec
//! and `"retry": [3]` for a retry policy. Fields that hold a nested struct
//! deserialize through [`optional`] or [`required`], which hand the struct a
//! deserializer that reads a map and nothing else; anything else is refused
//! with serde's own words ("invalid type: sequence, expected struct
//! SandboxSpec") at the field's path. (Request bodies themselves must start
//! with `{`, checked where they are read.)

use serde::de::{Deserialize, Deserializer, Visitor};
use serde::forward_to_deserialize_any;

/// For `#[serde(default, deserialize_with = "json_object::optional")]` on an
/// `Option` of a struct: `null` or absent is `None`, an object is the struct,
/// anything else is an error.
pub fn optional<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<Object<T>>::deserialize(deserializer).map(|found| found.map(|Object(value)| value))
}

/// For `#[serde(deserialize_with = "json_object::required")]` on a struct field.
pub fn required<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(MapOnly(deserializer))
}

/// A struct read from a JSON object only.
struct Object<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        required(deserializer).map(Object)
    }
}

/// A deserializer that reads a struct as a map only; everything else as the
/// wrapped one does.
struct MapOnly<D>(D);

impl<'de, D: Deserializer<'de>> Deserializer<'de> for MapOnly<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.0.deserialize_any(visitor)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_map(visitor)
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
        unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        a: u32,
        #[serde(default)]
        b: Option<u32>,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    struct Outer {
        #[serde(default, deserialize_with = "super::optional")]
        maybe: Option<Inner>,
        #[serde(deserialize_with = "super::required")]
        always: Inner,
    }

    fn parse(json: &str) -> Result<Outer, String> {
        let de = &mut serde_json::Deserializer::from_str(json);
        serde_path_to_error::deserialize(de).map_err(|e| format!("{}: {}", e.path(), e.inner()))
    }

    #[test]
    fn objects_and_null_parse_as_before() {
        let inner = Inner { a: 1, b: None };
        let parsed = parse(r#"{"maybe": {"a": 1}, "always": {"a": 1}}"#).expect("objects");
        assert_eq!(parsed, Outer { maybe: Some(Inner { a: 1, b: None }), always: Inner { a: 1, b: None } });
        assert_eq!(parse(r#"{"maybe": null, "always": {"a": 1}}"#).expect("null").maybe, None);
        assert_eq!(parse(r#"{"always": {"a": 1}}"#).expect("absent").always, inner);
        assert_eq!(serde_json::from_value::<Outer>(serde_json::json!({"always": {"a": 1}})).expect("from a value").always, inner);
    }

    #[test]
    fn an_array_for_a_nested_object_is_refused_at_its_path() {
        let err = parse(r#"{"maybe": [1, 2], "always": {"a": 1}}"#).expect_err("array refused");
        assert!(err.starts_with("maybe: invalid type: sequence, expected struct Inner"), "{err}");
        let err = parse(r#"{"always": [1]}"#).expect_err("array refused");
        assert!(err.starts_with("always: invalid type: sequence"), "{err}");
        let err = serde_json::from_value::<Outer>(serde_json::json!({"always": [1]})).expect_err("array refused in a value");
        assert!(err.to_string().contains("invalid type: sequence"), "{err}");
        let err = parse(r#"{"always": {"a": 1, "c": 2}}"#).expect_err("unknown field");
        assert!(err.starts_with("always.c: unknown field"), "{err}");
    }
}
