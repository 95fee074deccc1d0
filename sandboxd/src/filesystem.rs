//! envd's filesystem service: `Stat`, `ListDir`, `MakeDir`, `Move` and
//! `Remove`, unary Connect calls with JSON. Each runs one short script
//! inside the sandbox, so a path means what it means there (relative to
//! the home, through the sandbox's own mounts) and no link reaches past
//! what the sandbox sees. Entries come back as envd's `EntryInfo`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State as Shared;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::calls::{parse_unary as parse, route, Refusal};
use super::host::Host;

/// How long one filesystem call may take inside the sandbox.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The most output one call may print (a deep listing).
const MAX_OUTPUT: usize = 16 << 20;

/// The script's exit codes that name envd's errors.
const NOT_FOUND: i32 = 44;
const ALREADY_EXISTS: i32 = 45;
const NOT_A_DIRECTORY: i32 = 46;

/// Runs one operation (`$0`) on absolute paths; prints each entry as
/// `find -printf` fields separated by tabs, entries ended by NUL.
const SCRIPT: &str = r#"
set -u
fmt='%y\t%s\t%m\t%M\t%u\t%g\t%T@\t%l\t%p\0'
abs() { realpath -ms -- "$1"; }
exists() { [ -e "$1" ] || [ -L "$1" ]; }
case "$0" in
  stat) p=$(abs "$1"); exists "$p" || exit 44; find "$p" -maxdepth 0 -printf "$fmt" ;;
  list) p=$(abs "$1"); exists "$p" || exit 44; [ -d "$p" ] || exit 46
        find "$p" -mindepth 1 -maxdepth "$2" -printf "$fmt" ;;
  mkdir) p=$(abs "$1"); exists "$p" && exit 45; mkdir -p -- "$p" && find "$p" -maxdepth 0 -printf "$fmt" ;;
  move) s=$(abs "$1"); d=$(abs "$2"); exists "$s" || exit 44
        mkdir -p -- "$(dirname -- "$d")" && mv -T -- "$s" "$d" && find "$d" -maxdepth 0 -printf "$fmt" ;;
  remove) p=$(abs "$1"); exists "$p" || exit 44; rm -rf -- "$p" ;;
esac
"#;

#[derive(Debug, Deserialize)]
struct PathRequest {
    path: String,
    #[serde(default)]
    depth: Option<u32>,
}

#[derive(Debug, Deserialize)]
struct MoveRequest {
    source: String,
    destination: String,
}

/// One entry of `find -printf`, as envd's `EntryInfo`.
fn entry_info(fields: &str) -> Option<Value> {
    let parts: Vec<&str> = fields.splitn(9, '\t').collect();
    let [kind, size, mode, permissions, owner, group, modified, target, path] = parts.as_slice() else {
        return None;
    };
    let file_type = match *kind {
        "f" => "FILE_TYPE_FILE",
        "d" => "FILE_TYPE_DIRECTORY",
        "l" => "FILE_TYPE_SYMLINK",
        _ => "FILE_TYPE_UNSPECIFIED",
    };
    let seconds: f64 = modified.parse().ok()?;
    let modified = OffsetDateTime::from_unix_timestamp_nanos((seconds * 1e9) as i128).ok()?.format(&Rfc3339).ok()?;
    let name = path.rsplit('/').next().unwrap_or(path);
    let mut entry = json!({
        "name": name,
        "type": file_type,
        "path": path,
        "size": size.parse::<i64>().unwrap_or(0),
        "mode": u32::from_str_radix(mode, 8).unwrap_or(0),
        "permissions": permissions,
        "owner": owner,
        "group": group,
        "modifiedTime": modified,
    });
    if !target.is_empty() {
        entry["symlinkTarget"] = json!(target);
    }
    Some(entry)
}

/// Runs `op args` in the sandbox the request routes to; its entries, or
/// the Connect error the script's exit names.
async fn run(host: &Host, headers: &HeaderMap, op: &str, args: &[&str]) -> Result<Vec<Value>, Response> {
    let sandbox = route(host, headers).await?;
    run_in(host, &sandbox, op, args).await.map_err(IntoResponse::into_response)
}

/// Runs `op args` in `sandbox`.
async fn run_in(host: &Host, sandbox: &super::host::Entry, op: &str, args: &[&str]) -> Result<Vec<Value>, Refusal> {
    let mut argv = vec!["--noprofile", "--norc", "-c", SCRIPT, op];
    argv.extend_from_slice(args);
    let internal = |message: String| Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message);
    let child = host.local.spawn(&sandbox.local_id, "bash", &argv, &[], false).await.map_err(|e| internal(e.to_string()))?;
    let output = flotilla_desktop::process::run_child(child, None, CALL_TIMEOUT, MAX_OUTPUT, None)
        .await
        .map_err(|e| internal(e.to_string()))?;
    match output.exit_code {
        0 => Ok(String::from_utf8_lossy(&output.stdout).split('\0').filter(|e| !e.is_empty()).filter_map(entry_info).collect()),
        NOT_FOUND => Err(Refusal::new(StatusCode::NOT_FOUND, "not_found", format!("path '{}' does not exist", args[0]))),
        ALREADY_EXISTS => Err(Refusal::new(StatusCode::CONFLICT, "already_exists", format!("path '{}' already exists", args[0]))),
        NOT_A_DIRECTORY => {
            Err(Refusal::new(StatusCode::BAD_REQUEST, "invalid_argument", format!("path '{}' is not a directory", args[0])))
        }
        _ => Err(internal(String::from_utf8_lossy(&output.stderr).trim().to_owned())),
    }
}

/// The one entry of an answer as `{"entry": …}`.
fn one_entry(result: Result<Vec<Value>, Response>) -> Response {
    match result {
        Ok(entries) => Json(json!({"entry": entries.into_iter().next()})).into_response(),
        Err(refused) => refused.into_response(),
    }
}

pub(super) async fn stat(Shared(host): Shared<Arc<Host>>, headers: HeaderMap, body: Bytes) -> Response {
    match parse::<PathRequest>(&body) {
        Ok(request) => one_entry(run(&host, &headers, "stat", &[&request.path]).await),
        Err(refused) => refused.into_response(),
    }
}

pub(super) async fn make_dir(Shared(host): Shared<Arc<Host>>, headers: HeaderMap, body: Bytes) -> Response {
    match parse::<PathRequest>(&body) {
        Ok(request) => one_entry(run(&host, &headers, "mkdir", &[&request.path]).await),
        Err(refused) => refused.into_response(),
    }
}

pub(super) async fn move_entry(Shared(host): Shared<Arc<Host>>, headers: HeaderMap, body: Bytes) -> Response {
    match parse::<MoveRequest>(&body) {
        Ok(request) => one_entry(run(&host, &headers, "move", &[&request.source, &request.destination]).await),
        Err(refused) => refused.into_response(),
    }
}

pub(super) async fn list_dir(Shared(host): Shared<Arc<Host>>, headers: HeaderMap, body: Bytes) -> Response {
    let request = match parse::<PathRequest>(&body) {
        Ok(request) => request,
        Err(refused) => return refused.into_response(),
    };
    // Depth 0 is envd's "unlimited"; the SDKs send 1 by default.
    let depth = match request.depth.unwrap_or(1) {
        0 => u32::MAX.to_string(),
        n => n.to_string(),
    };
    match run(&host, &headers, "list", &[&request.path, &depth]).await {
        Ok(entries) => Json(json!({ "entries": entries })).into_response(),
        Err(refused) => refused.into_response(),
    }
}

pub(super) async fn remove(Shared(host): Shared<Arc<Host>>, headers: HeaderMap, body: Bytes) -> Response {
    match parse::<PathRequest>(&body) {
        Ok(request) => match run(&host, &headers, "remove", &[&request.path]).await {
            Ok(_) => Json(json!({})).into_response(),
            Err(refused) => refused,
        },
        Err(refused) => refused.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::entry_info;

    #[test]
    fn find_fields_become_envd_entries() {
        let entry = entry_info("f\t5\t644\t-rw-r--r--\tsandbox\tsandbox\t1700000000.5\t\t/home/notes.txt").expect("an entry");
        assert_eq!(entry["name"], "notes.txt");
        assert_eq!(entry["type"], "FILE_TYPE_FILE");
        assert_eq!((entry["size"].as_i64(), entry["mode"].as_u64()), (Some(5), Some(0o644)));
        assert_eq!(entry["modifiedTime"], "2023-11-14T22:13:20.5Z");
        assert!(entry.get("symlinkTarget").is_none());
        let link = entry_info("l\t4\t777\tlrwxrwxrwx\ta\tb\t0\t/etc\t/tmp/x").expect("a link");
        assert_eq!((link["type"].as_str(), link["symlinkTarget"].as_str()), (Some("FILE_TYPE_SYMLINK"), Some("/etc")));
        assert!(entry_info("f\t5").is_none(), "a short line is no entry");
    }
}
