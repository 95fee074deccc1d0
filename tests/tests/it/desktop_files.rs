//! Files in and out of a task's desktop, for every pipeline: a scripted
//! task (not claude-code) finds its input `files` in the home directory,
//! and what it leaves in `~/outbox/` or `~/Downloads/` is stored as its
//! artifacts, each with a `file` event and listed on the task with a link
//! that works; links out of the home are not followed. On the `office`
//! template a scripted task makes a spreadsheet in LibreOffice and saves
//! it to the outbox, and the stored file opens as a spreadsheet.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use flotilla_blobstore::{content_hash, BlobStore};
use flotilla_tests::desktop::{DesktopFleet, DesktopOptions};
use flotilla_tests::s3_server::S3Server;
use flotilla_tests::tasks::record;
use flotilla_tests::{api_key, spawn_api_with_blobs, unique_prefix, ApiClient};
use flotilla_types::event::{Event, EventKind, FileOp};
use flotilla_types::ids::TaskId;
use flotilla_types::task::TaskStatus;
use flotilla_worker::sandbox::{LocalConfig, LocalProvider};
use serde_json::{json, Value};

/// The `file` events' paths, with the hash and size each announced.
fn file_events(events: &[Event]) -> BTreeMap<String, (String, u64)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::File { path, op: FileOp::Write, hash: Some(hash), bytes } => Some((path.clone(), (hash.clone(), *bytes))),
            _ => None,
        })
        .collect()
}

/// Checks each announced file is stored at its artifact key with the
/// announced hash; returns the stored bytes by path.
async fn stored_files(store: &BlobStore, task: &TaskId, events: &[Event]) -> BTreeMap<String, Vec<u8>> {
    let mut stored = BTreeMap::new();
    for (path, (hash, bytes)) in file_events(events) {
        let key = store.layout().artifact(task, &path).expect("a key");
        let body = store.get(&key).await.unwrap_or_else(|e| panic!("{path} is stored: {e}"));
        assert_eq!(&content_hash(&body), &hash, "{path}");
        assert_eq!(body.len() as u64, bytes, "{path}");
        stored.insert(path, body.to_vec());
    }
    stored
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_outputs_are_stored_with_file_events_and_links_are_not_followed() {
    let s3 = S3Server::start();
    let store = s3.store(&unique_prefix());
    let fleet = DesktopFleet::start(DesktopOptions { blobs: Some(store.clone()), ..DesktopOptions::default() }).await;
    let command =
        "cp inbox/notes.txt outbox/copy.txt && mkdir -p Downloads/sub && printf 'a,b\\n1,2\\n' > Downloads/sub/report.csv \
                   && ln -s /etc/passwd outbox/passwd && ln -s /etc Downloads/etc && ln -s /etc/hostname outbox/host.txt\n";
    let spec = json!({
        "prompt": "copy the notes to the outbox and download a report",
        "pipeline": "scripted",
        "files": {"inbox/notes.txt": "notes from the task\n"},
        "actions": [
            {"type": "click", "x": 512, "y": 384},
            {"type": "type", "text": command},
            {"type": "wait", "ms": 500}
        ]
    });
    let (id, events) = fleet.run_to_end(spec).await;
    let task = record(&fleet.queue, &id).await;
    assert_eq!(task.status, TaskStatus::Succeeded, "{events:?}");

    let stored = stored_files(&store, &id, &events).await;
    let paths: Vec<&str> = stored.keys().map(String::as_str).collect();
    assert_eq!(paths, ["Downloads/sub/report.csv", "outbox/copy.txt"], "links are not outputs: {events:?}");
    assert_eq!(stored["outbox/copy.txt"], b"notes from the task\n", "the input was in the home directory");
    assert_eq!(stored["Downloads/sub/report.csv"], b"a,b\n1,2\n");

    // The task lists them, each with a link that works.
    let api = spawn_api_with_blobs(fleet.config.clone(), store.clone()).await;
    let client = ApiClient::new(&api, api_key());
    let (status, page) = client.get(&format!("/v1/tasks/{id}")).await;
    assert_eq!(status, 200, "{page}");
    let listed = page["files"].as_array().expect("files listed");
    let listed_paths: Vec<&str> = listed.iter().filter_map(|f| f["path"].as_str()).collect();
    assert_eq!(listed_paths, paths);
    let url = listed[1]["url"].as_str().expect("a presigned url");
    let fetched = reqwest::get(url).await.expect("fetch").bytes().await.expect("body");
    assert_eq!(&fetched[..], b"notes from the task\n");
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_office_task_saves_a_spreadsheet_that_is_stored_and_opens() {
    let s3 = S3Server::start();
    let store = s3.store(&unique_prefix());
    let config = flotilla_tests::config_file("[tenants.acme]\nsandbox_templates = [\"office\"]\n");
    let local = LocalConfig { start_timeout: Duration::from_secs(30), ..LocalConfig::default() };
    let options = DesktopOptions {
        blobs: Some(store.clone()),
        env: vec![("FLOTILLA_CONFIG", config.to_string_lossy().into_owned())],
        provider: Some(Arc::new(LocalProvider::new(local))),
        ..DesktopOptions::default()
    };
    let fleet = DesktopFleet::start(options).await;
    let spec = json!({
        "prompt": "make a spreadsheet of fruit and save it to the outbox",
        "pipeline": "scripted",
        "sandbox": {"template": "office"},
        "max_duration_s": 120,
        "actions": office_actions()
    });
    let (id, events) = fleet.run_to_end(spec).await;
    let task = record(&fleet.queue, &id).await;
    assert_eq!(task.status, TaskStatus::Succeeded, "{events:?}");
    let stored = stored_files(&store, &id, &events).await;
    let sheet = stored.get("outbox/fruit.ods").unwrap_or_else(|| panic!("the spreadsheet is stored: {events:?}"));
    let cells = spreadsheet_cells(sheet);
    for expected in ["apples", "pears", "3", "5"] {
        assert!(cells.iter().any(|c| c == expected), "{expected} in {cells:?}");
    }
    fleet.stop().await;
}

/// Types two rows into Calc's first sheet and saves it as
/// `~/outbox/fruit.ods` through the Save As dialog.
fn office_actions() -> Value {
    json!([
        {"type": "wait", "ms": 1500},
        {"type": "keypress", "keys": ["ctrl", "Home"]},
        {"type": "type", "text": "apples\t3\n"},
        {"type": "keypress", "keys": ["Home"]},
        {"type": "type", "text": "pears\t5\n"},
        {"type": "keypress", "keys": ["ctrl", "shift", "s"]},
        {"type": "wait", "ms": 2000},
        {"type": "keypress", "keys": ["ctrl", "a"]},
        {"type": "type", "text": "~/outbox/fruit.ods\n"},
        {"type": "wait", "ms": 2000},
        {"type": "keypress", "keys": ["Return"]},
        {"type": "wait", "ms": 2000}
    ])
}

/// The text of every cell of an OpenDocument spreadsheet, read with the
/// Python standard library (a valid `.ods` is a zip with `content.xml`).
fn spreadsheet_cells(ods: &[u8]) -> Vec<String> {
    let dir = std::env::temp_dir().join(format!("flotilla-ods-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("sheet.ods");
    std::fs::write(&path, ods).expect("write");
    let script = r#"
import sys, zipfile, xml.etree.ElementTree as ET
z = zipfile.ZipFile(sys.argv[1])
assert z.read("mimetype") == b"application/vnd.oasis.opendocument.spreadsheet", z.read("mimetype")
root = ET.fromstring(z.read("content.xml"))
ns = "{urn:oasis:names:tc:opendocument:xmlns:table:1.0}"
for cell in root.iter(ns + "table-cell"):
    text = "".join(cell.itertext()).strip()
    if text:
        print(text)
"#;
    let output = std::process::Command::new("python3").arg("-c").arg(script).arg(&path).output().expect("python3 runs");
    std::fs::remove_dir_all(&dir).ok();
    assert!(output.status.success(), "a valid spreadsheet: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).lines().map(str::to_owned).collect()
}
