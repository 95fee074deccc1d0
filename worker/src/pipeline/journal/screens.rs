//! The screenshots of a carried-over conversation: the journal never holds
//! their bytes. Before a checkpoint is journaled each base64 PNG in it
//! (an object with `media_type` or `mimeType` `image/png` and `data`) has
//! its `data` swapped for the bytes' blob-store hash under
//! [`SCREEN_HASH`], the bytes being stored first (content-addressed, so a
//! screenshot the step loop already stored costs nothing); a later attempt
//! fetches them back by hash before it restores the conversation. The
//! checkpoint is also bounded: whole turns after the opening message are
//! left out, oldest first, until the journal fits.

use std::collections::{BTreeMap, BTreeSet};

use base64::prelude::{Engine as _, BASE64_STANDARD};
use bytes::Bytes;
use flotilla_blobstore::{content_hash, BlobStore};
use serde_json::{Map, Value};

use super::super::PipelineError;

/// The field that replaces an image's `data`: the blake3 hash of its bytes.
pub const SCREEN_HASH: &str = "screen_hash";

/// `conversation` with every PNG's bytes swapped for its hash, the bytes
/// stored in `blobs` unless `stored` already holds their hash (it is kept
/// up to date, so each screenshot is stored once per run). `None` when it
/// shows screenshots and there is no blob store to keep them in (the
/// conversation is then not carried over).
pub async fn to_hashes(
    mut conversation: Value,
    blobs: Option<&BlobStore>,
    stored: &mut BTreeSet<String>,
) -> Result<Option<Value>, PipelineError> {
    let mut found = BTreeMap::new();
    swap_out(&mut conversation, &mut found);
    if found.is_empty() {
        return Ok(Some(conversation));
    }
    let Some(blobs) = blobs else {
        return Ok(None);
    };
    for (hash, png) in found {
        if stored.contains(&hash) {
            continue;
        }
        blobs
            .put_screenshot_hashed(&hash, png)
            .await
            .map_err(|e| PipelineError::Retryable(format!("a screenshot of the conversation cannot be stored: {e}")))?;
        stored.insert(hash);
    }
    Ok(Some(conversation))
}

/// `conversation` with every hash swapped back for its bytes, fetched from
/// `blobs`.
pub async fn from_hashes(mut conversation: Value, blobs: Option<&BlobStore>) -> Result<Value, String> {
    let mut wanted = BTreeSet::new();
    hashes_in(&conversation, &mut wanted);
    if wanted.is_empty() {
        return Ok(conversation);
    }
    let Some(blobs) = blobs else {
        return Err("its screenshots are in a blob store this worker has none of".into());
    };
    let mut fetched = BTreeMap::new();
    for hash in wanted {
        let png = blobs
            .get(&blobs.layout().screenshot(&hash))
            .await
            .map_err(|e| format!("its screenshot {hash} cannot be read: {e}"))?;
        fetched.insert(hash, BASE64_STANDARD.encode(&png));
    }
    swap_in(&mut conversation, &fetched);
    Ok(conversation)
}

/// Leaves out the oldest turn of `conversation`'s `history` (the pair after
/// its opening message); false when no turn can go (only the opening
/// message and the newest answer are left, or it has no history).
pub fn drop_oldest_turn(conversation: &mut Value) -> bool {
    match conversation.get_mut("history").and_then(Value::as_array_mut) {
        Some(history) if history.len() > 3 => {
            history.drain(1..3);
            true
        }
        _ => false,
    }
}

/// Whether `map` is a base64 PNG: `data` beside an `image/png` media type.
fn is_png(map: &Map<String, Value>) -> bool {
    let media = map.get("media_type").or_else(|| map.get("mimeType")).and_then(Value::as_str);
    media == Some("image/png") && map.get("data").is_some_and(Value::is_string)
}

fn swap_out(value: &mut Value, found: &mut BTreeMap<String, Bytes>) {
    match value {
        Value::Array(items) => items.iter_mut().for_each(|item| swap_out(item, found)),
        Value::Object(map) if is_png(map) => {
            let Some(Ok(png)) = map.get("data").and_then(Value::as_str).map(|data| BASE64_STANDARD.decode(data)) else {
                return;
            };
            let hash = content_hash(&png);
            map.remove("data");
            map.insert(SCREEN_HASH.to_owned(), Value::String(hash.clone()));
            found.insert(hash, Bytes::from(png));
        }
        Value::Object(map) => map.values_mut().for_each(|item| swap_out(item, found)),
        _ => {}
    }
}

fn hashes_in(value: &Value, wanted: &mut BTreeSet<String>) {
    match value {
        Value::Array(items) => items.iter().for_each(|item| hashes_in(item, wanted)),
        Value::Object(map) => match map.get(SCREEN_HASH).and_then(Value::as_str) {
            Some(hash) => {
                wanted.insert(hash.to_owned());
            }
            None => map.values().for_each(|item| hashes_in(item, wanted)),
        },
        _ => {}
    }
}

fn swap_in(value: &mut Value, fetched: &BTreeMap<String, String>) {
    match value {
        Value::Array(items) => items.iter_mut().for_each(|item| swap_in(item, fetched)),
        Value::Object(map) => match map.get(SCREEN_HASH).and_then(Value::as_str).and_then(|hash| fetched.get(hash)) {
            Some(data) => {
                let data = Value::String(data.clone());
                map.remove(SCREEN_HASH);
                map.insert("data".to_owned(), data);
            }
            None => map.values_mut().for_each(|item| swap_in(item, fetched)),
        },
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const PNG: &[u8] = b"\x89PNG\r\n\x1a\nrest";

    #[tokio::test]
    async fn screenshots_become_hashes_and_come_back_as_the_same_bytes() {
        let data = BASE64_STANDARD.encode(PNG);
        let conversation = json!({"history": [
            {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}]},
            {"role": "model", "parts": [{"inlineData": {"mimeType": "image/png", "data": data}}, {"text": "data"}]},
        ]});
        let mut found = BTreeMap::new();
        let mut journaled = conversation.clone();
        swap_out(&mut journaled, &mut found);
        let text = journaled.to_string();
        assert!(!text.contains(&data), "no bytes in the journal: {text}");
        assert_eq!(found.keys().collect::<Vec<_>>(), vec![&content_hash(PNG)], "one stored object for both");
        let mut wanted = BTreeSet::new();
        hashes_in(&journaled, &mut wanted);
        let fetched = wanted.into_iter().map(|hash| (hash, data.clone())).collect();
        swap_in(&mut journaled, &fetched);
        assert_eq!(journaled, conversation);
        let carried = to_hashes(conversation.clone(), None, &mut BTreeSet::new()).await.expect("no store needed to decide");
        assert_eq!(carried, None, "no store: not carried");
        assert!(from_hashes(json!({"history": [{SCREEN_HASH: "ab"}]}), None).await.is_err());
    }

    #[test]
    fn the_oldest_turns_go_first_and_the_opening_message_and_newest_answer_stay() {
        let mut conversation = json!({"history": ["prompt", "a1", "r1", "a2", "r2", "a3"]});
        assert!(drop_oldest_turn(&mut conversation));
        assert_eq!(conversation["history"], json!(["prompt", "a2", "r2", "a3"]));
        assert!(drop_oldest_turn(&mut conversation));
        assert_eq!(conversation["history"], json!(["prompt", "a3"]));
        assert!(!drop_oldest_turn(&mut conversation));
        assert!(!drop_oldest_turn(&mut json!({"previous_response_id": "r"})));
    }
}
