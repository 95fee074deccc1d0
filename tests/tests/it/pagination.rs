//! Every list pages: `limit` items at a time, `next_cursor` to the next
//! page, no gap and no repeat even while the list changes under the walk.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use flotilla_queue::page::ScoreCursor;
use flotilla_tests::schedule_scenarios::task;
use flotilla_tests::tasks::{queue, submit_many, tenant, wait_spec};
use flotilla_tests::{spawn_api, test_config, unique_prefix, ApiClient, RedisServer};
use flotilla_types::TaskId;
use futures::{stream, StreamExt};
use redis::AsyncCommands;
use serde_json::{json, Value};

/// Follows `next_cursor` from the first page of `path` until it is null,
/// returning the ids of each page.
async fn walk(client: &ApiClient, path: &str, field: &str, limit: usize) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let url = match &cursor {
            None => format!("{path}?limit={limit}"),
            Some(c) => format!("{path}?limit={limit}&cursor={}", urlencoding(c)),
        };
        let (status, page) = client.get(&url).await;
        assert_eq!(status, 200, "{url}: {page}");
        let ids: Vec<String> =
            page[field].as_array().expect("a list").iter().map(|item| item["id"].as_str().expect("id").to_owned()).collect();
        assert!(ids.len() <= limit, "a page holds at most limit items");
        pages.push(ids);
        cursor = page["next_cursor"].as_str().map(str::to_owned);
        if cursor.is_none() {
            return pages;
        }
        assert!(pages.len() < 10_000, "the walk ends");
    }
}

/// Cursors are ids and `<ms>:<id>`: only `:` needs no escape, but encode it anyway.
fn urlencoding(text: &str) -> String {
    text.replace(':', "%3A")
}

async fn ready(client: &ApiClient) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.get("/readyz").await.0 != 200 {
        assert!(Instant::now() < deadline, "the api never became ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_schedules_list_in_pages_with_no_gap_and_no_repeat() {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let dir = std::env::temp_dir().join(format!("flotilla-pagination-{prefix}"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("flotilla.toml");
    std::fs::write(&file, "[tenants.acme]\nmax_schedules = 1000\n").expect("config file");
    let config = test_config(&redis, &prefix, &[("FLOTILLA_CONFIG", file.to_str().expect("utf-8 path"))]);
    let api = spawn_api(config).await;
    let acme = ApiClient::new(&api, flotilla_tests::api_key());
    let globex = ApiClient::new(&api, flotilla_tests::fleet::globex_key());
    ready(&acme).await;

    let body = json!({"cron": "0 3 * * *", "timezone": "UTC", "task": task()});
    let created: Vec<String> = stream::iter(0..1000)
        .map(|_| {
            let (acme, body) = (acme.clone(), body.clone());
            async move {
                let (status, made) = acme.post("/v1/schedules", &body).await;
                assert_eq!(status, 201, "{made}");
                made["id"].as_str().expect("id").to_owned()
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let made: HashSet<&String> = created.iter().collect();
    assert_eq!(made.len(), 1000);

    let pages = walk(&acme, "/v1/schedules", "schedules", 37).await;
    assert_eq!(pages.len(), 1000_usize.div_ceil(37), "every page but the last is full");
    let listed: Vec<String> = pages.concat();
    let unique: HashSet<&String> = listed.iter().collect();
    assert_eq!(listed.len(), unique.len(), "no repeat");
    assert_eq!(unique, made, "no gap");
    let mut newest_first = listed.clone();
    newest_first.sort_by(|a, b| b.cmp(a));
    assert_eq!(listed, newest_first, "newest first");

    // Changes during a walk: one already seen deleted, one new created;
    // neither shifts the others.
    let (status, first) = acme.get("/v1/schedules?limit=100").await;
    assert_eq!(status, 200);
    let seen = first["schedules"][0]["id"].as_str().expect("id").to_owned();
    assert_eq!(acme.delete(&format!("/v1/schedules/{seen}")).await.0, 204);
    let (status, _) = acme.post("/v1/schedules", &body).await;
    assert_eq!(status, 201);
    let mut rest =
        first["schedules"].as_array().expect("list").iter().map(|s| s["id"].as_str().expect("id").to_owned()).collect::<Vec<_>>();
    let mut cursor = first["next_cursor"].as_str().map(str::to_owned);
    while let Some(c) = cursor {
        let (status, page) = acme.get(&format!("/v1/schedules?limit=100&cursor={c}")).await;
        assert_eq!(status, 200, "{page}");
        rest.extend(page["schedules"].as_array().expect("list").iter().map(|s| s["id"].as_str().expect("id").to_owned()));
        cursor = page["next_cursor"].as_str().map(str::to_owned);
    }
    assert_eq!(rest.len(), 1000, "the 1000 present when the walk began, each once");
    assert_eq!(rest.iter().collect::<HashSet<_>>(), made);

    let (status, other) = globex.get("/v1/schedules").await;
    assert_eq!((status, &other["schedules"], &other["next_cursor"]), (200, &json!([]), &Value::Null), "another tenant sees none");
    for bad in ["limit=0", "limit=501", "limit=x", "cursor=sch_nope", "cursor=tsk_01jd0000000000000000000000"] {
        let (status, body) = acme.get(&format!("/v1/schedules?{bad}")).await;
        assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_request")), "{bad}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn dead_letters_list_in_pages_even_when_many_died_in_the_same_millisecond() {
    let redis = RedisServer::start();
    let config = test_config(&redis, &unique_prefix(), &[]);
    let q = queue(&config).await;
    let ids = submit_many(&q, &wait_spec(1), 230).await;
    // Dead-lettered at 23 distinct times, ten tasks each: every page
    // boundary below falls among ties.
    let mut conn = q.redis().shared();
    for (i, id) in ids.iter().enumerate() {
        let () = conn.zadd(q.keys().dead(&tenant()), id.as_str(), 1_700_000_000_000_i64 + (i / 10) as i64).await.expect("zadd");
    }
    let api = spawn_api(config).await;
    let acme = ApiClient::new(&api, flotilla_tests::api_key());
    ready(&acme).await;

    for limit in [1, 7, 10, 50, 500] {
        let pages = walk(&acme, "/v1/dead", "tasks", limit).await;
        let listed = pages.concat();
        assert_eq!(listed.len(), 230, "limit {limit}: no gap, no repeat");
        assert_eq!(
            listed.iter().collect::<HashSet<_>>(),
            ids.iter().map(TaskId::as_str).map(str::to_owned).collect::<Vec<_>>().iter().collect()
        );
        // Newest death first, ties by id, descending.
        let mut expected: Vec<(usize, &str)> = ids.iter().enumerate().map(|(i, id)| (i / 10, id.as_str())).collect();
        expected.sort_by(|a, b| b.cmp(a));
        assert_eq!(listed, expected.iter().map(|(_, id)| id.to_string()).collect::<Vec<_>>(), "limit {limit}");
    }
    let (_, first) = acme.get("/v1/dead?limit=3").await;
    let cursor = first["next_cursor"].as_str().expect("a next page");
    assert!(ScoreCursor::parse(cursor).is_some(), "{cursor}");
    for bad in ["cursor=12", "cursor=tsk_01jd0000000000000000000000", "cursor=x%3Atsk_01jd0000000000000000000000", "limit=501"] {
        let (status, body) = acme.get(&format!("/v1/dead?{bad}")).await;
        assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_request")), "{bad}: {body}");
    }
    let (_, other) = ApiClient::new(&api, flotilla_tests::fleet::globex_key()).get("/v1/dead").await;
    assert_eq!(other["tasks"], json!([]), "another tenant sees none");
}
