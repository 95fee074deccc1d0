//! The files a task stored, as its record lists them: read from the `file`
//! events of its latest attempt, each path's last write, a path whose last
//! event is a delete left out.

use std::collections::BTreeMap;

use flotilla_types::ids::{TaskId, TenantId};

use super::Reader;
use crate::error::QueueError;

/// One stored file in a task's list.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FileRef {
    /// The seq of its last `file` event.
    pub seq: u64,
    /// Its path: below the home directory for outputs (`outbox/…`,
    /// `Downloads/…`), below the work directory for a claude-code task's.
    pub path: String,
    pub hash: String,
    pub bytes: u64,
}

/// The files announced after the last `started` event, by path.
pub(super) fn latest_attempt_files(events: &[String]) -> Vec<FileRef> {
    /// The fields of a stored event this list needs.
    #[derive(serde::Deserialize)]
    struct Peek {
        seq: u64,
        #[serde(rename = "type")]
        kind: String,
        path: Option<String>,
        op: Option<String>,
        hash: Option<String>,
        bytes: Option<u64>,
    }
    let mut files = BTreeMap::new();
    for raw in events {
        let Ok(event) = serde_json::from_str::<Peek>(raw) else { continue };
        match (event.kind.as_str(), event.path, event.op.as_deref(), event.hash) {
            ("started", ..) => files.clear(),
            ("file", Some(path), Some("write"), Some(hash)) => {
                let file = FileRef { seq: event.seq, path: path.clone(), hash, bytes: event.bytes.unwrap_or(0) };
                files.insert(path, file);
            }
            ("file", Some(path), Some("delete"), _) => {
                files.remove(&path);
            }
            _ => {}
        }
    }
    files.into_values().collect()
}

impl Reader<'_> {
    /// The files of a task's latest attempt, by path, read from its `file`
    /// events.
    pub async fn files(self, tenant: &TenantId, id: &TaskId) -> Result<Vec<FileRef>, QueueError> {
        let events = self.events_after(tenant, id, 0).await?;
        Ok(latest_attempt_files(&events))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_lists_its_last_write_of_the_latest_attempt() {
        let events: Vec<String> = [
            r#"{"seq":1,"type":"started"}"#,
            r#"{"seq":2,"type":"file","path":"outbox/old.txt","op":"write","hash":"h0","bytes":1}"#,
            r#"{"seq":3,"type":"started"}"#,
            r#"{"seq":4,"type":"file","path":"outbox/a.ods","op":"write","hash":"h1","bytes":10}"#,
            r#"{"seq":5,"type":"file","path":"gone.txt","op":"write","hash":"h2","bytes":3}"#,
            r#"{"seq":6,"type":"file","path":"outbox/a.ods","op":"write","hash":"h3","bytes":12}"#,
            r#"{"seq":7,"type":"file","path":"gone.txt","op":"delete","hash":null,"bytes":0}"#,
        ]
        .map(String::from)
        .to_vec();
        let files = latest_attempt_files(&events);
        assert_eq!(files, vec![FileRef { seq: 6, path: "outbox/a.ods".into(), hash: "h3".into(), bytes: 12 }]);
    }
}
