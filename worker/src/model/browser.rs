//! What a model asks of a browser beyond the screen: going to a page,
//! reading it, filling a field or clicking an element by the reference a
//! reading gave. The browser pipeline carries these out through the
//! DevTools protocol ([`crate::browser`]); a desktop pipeline refuses them.

use flotilla_types::action::MouseButton;
use serde::Serialize;
use serde_json::Value;

/// One browser call, as the step loop carries it out.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "call", rename_all = "snake_case")]
pub enum BrowserCall {
    /// Load `url` in the tab (a URL without a scheme gets `https://`).
    Navigate {
        url: String,
    },
    Back,
    Forward,
    Reload,
    /// The page as a list of elements with references; only the
    /// interactive ones when `filter` is `interactive`, the off-screen ones
    /// too when it is `all`.
    ReadPage {
        filter: Option<String>,
    },
    /// The elements whose text matches `query`, with references.
    Find {
        query: String,
    },
    /// The page's visible text.
    PageText,
    /// Sets a form field (input, textarea, select, checkbox) by reference.
    FormInput {
        reference: String,
        value: Value,
    },
    /// Clicks the element a reference names, `clicks` times.
    Click {
        reference: String,
        button: MouseButton,
        clicks: u8,
    },
    /// Moves the pointer over the element a reference names.
    Hover {
        reference: String,
    },
    /// Scrolls the element a reference names into view.
    ScrollTo {
        reference: String,
    },
    /// The open tabs (the pipeline drives one).
    ListTabs,
}

impl BrowserCall {
    /// The call's name in events and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Navigate { .. } => "navigate",
            Self::Back => "back",
            Self::Forward => "forward",
            Self::Reload => "reload",
            Self::ReadPage { .. } => "read_page",
            Self::Find { .. } => "find",
            Self::PageText => "get_page_text",
            Self::FormInput { .. } => "form_input",
            Self::Click { .. } => "click",
            Self::Hover { .. } => "hover",
            Self::ScrollTo { .. } => "scroll_to",
            Self::ListTabs => "list_tabs",
        }
    }

    /// A `navigate` target as the toolset writes it: `back`, `forward` and
    /// `reload` are history moves, anything else a URL.
    pub fn from_navigate(url: &str) -> Self {
        match url.trim() {
            "back" => Self::Back,
            "forward" => Self::Forward,
            "reload" => Self::Reload,
            other => Self::Navigate { url: other.to_owned() },
        }
    }
}

/// The page the browser shows, as models are told after each call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageState {
    pub url: String,
    pub title: String,
}
