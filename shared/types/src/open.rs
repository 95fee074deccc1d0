//! Values of a vocabulary that grows: a status, a priority, a stop code, a
//! pipeline. The server refuses a name it does not know; a client reads
//! what a newer server sends and must not, so it reads such a field as an
//! [`Open`] value, which keeps a name it does not know as it came.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::task::{Pipeline, Priority, StopCode, TaskStatus};

/// A closed set of names, each a value: what [`Open`] reads.
pub trait Vocabulary: Copy + 'static {
    /// Every value, in the order the API lists them.
    const ALL: &'static [Self];

    /// The value's name on the wire.
    fn name(self) -> &'static str;

    /// The value of this name, if it is one.
    fn of_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|value| value.name() == name)
    }
}

impl Vocabulary for TaskStatus {
    const ALL: &'static [Self] = &TaskStatus::ALL;
    fn name(self) -> &'static str {
        self.as_str()
    }
}

impl Vocabulary for Priority {
    const ALL: &'static [Self] = &Priority::ALL;
    fn name(self) -> &'static str {
        self.as_str()
    }
}

impl Vocabulary for StopCode {
    const ALL: &'static [Self] = &StopCode::ALL;
    fn name(self) -> &'static str {
        self.as_str()
    }
}

impl Vocabulary for Pipeline {
    const ALL: &'static [Self] = &Pipeline::ALL;
    fn name(self) -> &'static str {
        self.as_str()
    }
}

/// A value of `T`, or a name `T` does not have (from a newer server).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Open<T> {
    Known(T),
    Unknown(String),
}

impl<T: Vocabulary> Open<T> {
    /// Reads a name: a known one as its value, any other as it is.
    pub fn of_name(name: &str) -> Self {
        T::of_name(name).map_or_else(|| Open::Unknown(name.to_owned()), Open::Known)
    }

    /// The name as it came.
    pub fn name(&self) -> &str {
        match self {
            Open::Known(value) => value.name(),
            Open::Unknown(name) => name,
        }
    }

    /// The value, when it is one this side knows.
    pub fn known(&self) -> Option<T> {
        match self {
            Open::Known(value) => Some(*value),
            Open::Unknown(_) => None,
        }
    }
}

impl<T: Vocabulary> From<T> for Open<T> {
    fn from(value: T) -> Self {
        Open::Known(value)
    }
}

impl<T: Vocabulary> fmt::Display for Open<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl<T: Vocabulary> Serialize for Open<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de, T: Vocabulary> Deserialize<'de> for Open<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Ok(Self::of_name(&name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_known_name_reads_as_its_value_and_any_other_as_it_came() {
        let read = |json: &str| serde_json::from_str::<Open<TaskStatus>>(json).expect("a string reads");
        assert_eq!(read(r#""running""#), Open::Known(TaskStatus::Running));
        assert_eq!(read(r#""paused""#), Open::Unknown("paused".to_owned()));
        assert_eq!(read(r#""paused""#).to_string(), "paused");
        assert_eq!(serde_json::to_string(&read(r#""paused""#)).expect("writes"), r#""paused""#);
        assert_eq!(Open::<Priority>::of_name("high").known(), Some(Priority::High));
        assert!(serde_json::from_str::<TaskStatus>(r#""paused""#).is_err(), "the server's own type still refuses it");
    }

    #[test]
    fn every_value_reads_back_by_its_name() {
        fn check<T: Vocabulary + PartialEq + fmt::Debug + Serialize>() {
            for value in T::ALL {
                let wire = serde_json::to_value(value).expect("writes");
                assert_eq!(wire.as_str(), Some(value.name()), "the name is what serde writes");
                assert_eq!(Open::<T>::of_name(value.name()).known(), Some(*value));
            }
        }
        check::<TaskStatus>();
        check::<Priority>();
        check::<StopCode>();
        check::<Pipeline>();
    }
}
