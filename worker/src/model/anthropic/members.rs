//! The member tools of `computer_toolset_20260801`: each action of the
//! toolset is a tool of its own, called by name with `toolset_name`
//! `computer`. Members the sandbox cannot do are sent disabled in the
//! toolset's `configs`, and a call to one is answered as an error.

use serde_json::{json, Map, Value};

/// The toolset's name, carried by every member call and echoed by every
/// result.
pub const TOOLSET_NAME: &str = "computer";

/// One member of the toolset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Member {
    Key,
    HoldKey,
    Type,
    CursorPosition,
    MouseMove,
    LeftMouseDown,
    LeftMouseUp,
    LeftClick,
    LeftClickDrag,
    RightClick,
    MiddleClick,
    DoubleClick,
    TripleClick,
    Scroll,
    Wait,
    Screenshot,
    Zoom,
}

impl Member {
    /// Every member, in the order the API lists them.
    pub const ALL: [Member; 17] = [
        Self::Key,
        Self::HoldKey,
        Self::Type,
        Self::CursorPosition,
        Self::MouseMove,
        Self::LeftMouseDown,
        Self::LeftMouseUp,
        Self::LeftClick,
        Self::LeftClickDrag,
        Self::RightClick,
        Self::MiddleClick,
        Self::DoubleClick,
        Self::TripleClick,
        Self::Scroll,
        Self::Wait,
        Self::Screenshot,
        Self::Zoom,
    ];

    /// The member's tool name (the `action` of the older tools).
    pub fn name(self) -> &'static str {
        match self {
            Self::Key => "key",
            Self::HoldKey => "hold_key",
            Self::Type => "type",
            Self::CursorPosition => "cursor_position",
            Self::MouseMove => "mouse_move",
            Self::LeftMouseDown => "left_mouse_down",
            Self::LeftMouseUp => "left_mouse_up",
            Self::LeftClick => "left_click",
            Self::LeftClickDrag => "left_click_drag",
            Self::RightClick => "right_click",
            Self::MiddleClick => "middle_click",
            Self::DoubleClick => "double_click",
            Self::TripleClick => "triple_click",
            Self::Scroll => "scroll",
            Self::Wait => "wait",
            Self::Screenshot => "screenshot",
            Self::Zoom => "zoom",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|member| member.name() == name)
    }

    /// Whether the member's result is an image of its own (not just the
    /// screen after it).
    pub fn shows(self) -> bool {
        matches!(self, Self::Screenshot | Self::Zoom)
    }
}

/// The toolset's entry in `tools`: its type, and `configs` turning off the
/// `disabled` members (absent when every member is on).
pub fn definition(tool_type: &str, disabled: &[Member]) -> Value {
    let mut entry = json!({ "type": tool_type });
    if !disabled.is_empty() {
        let configs: Map<String, Value> =
            disabled.iter().map(|member| (member.name().to_owned(), json!({ "enabled": false }))).collect();
        entry["configs"] = Value::Object(configs);
    }
    entry
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_disabled_members_are_configured_off() {
        for member in Member::ALL {
            assert_eq!(Member::from_name(member.name()), Some(member));
        }
        assert_eq!(definition("computer_toolset_20260801", &[]), json!({"type": "computer_toolset_20260801"}));
        assert_eq!(
            definition("computer_toolset_20260801", &[Member::Zoom, Member::HoldKey]),
            json!({"type": "computer_toolset_20260801", "configs": {"zoom": {"enabled": false}, "hold_key": {"enabled": false}}})
        );
    }
}
