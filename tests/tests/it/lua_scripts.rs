//! Each Redis script called directly against a real redis-server, as a
//! table: given this state and these keys and arguments, this reply and this
//! state. The scripts come from `flotilla_queue::testing` exactly as the
//! queue sends them (files joined, constants written in).
//!
//! In a case, `~` in any command, key or argument is the case's own key
//! prefix; keys and arguments are split on spaces, with `''` for an empty
//! one and `·` for a space inside one. A reply or a state is written as `render` prints a Redis value:
//! `nil`, a number, the text (`''` when empty), or `[a, b]`.

use flotilla_queue::testing;
use flotilla_tests::{unique_prefix, RedisServer};
use redis::Value;

/// One row of a script's table.
struct Case<'a> {
    /// Commands that make the state the script finds.
    given: &'a [&'a str],
    keys: &'a str,
    args: &'a str,
    reply: &'a str,
    /// Commands read after the call, each with what it must answer.
    then: &'a [(&'a str, &'a str)],
}

/// Runs every case of `name`'s table on one server, each under a prefix of
/// its own.
fn run(name: &str, cases: &[Case<'_>]) {
    run_script(name, testing::script(name), cases);
}

/// Runs every case of `script`'s table (called `name` in failures).
fn run_script(name: &str, script: &redis::Script, cases: &[Case<'_>]) {
    let redis = RedisServer::start();
    let mut conn = redis.connection();
    for (i, case) in cases.iter().enumerate() {
        let prefix = format!("{}:", unique_prefix());
        let words = |text: &str| -> Vec<String> {
            text.split_whitespace()
                .map(|w| if w == "''" { String::new() } else { w.replace('~', &prefix).replace('·', " ") })
                .collect()
        };
        for command in case.given {
            let _: Value = query(&mut conn, &words(command)).unwrap_or_else(|e| panic!("{name} case {i}: {command}: {e}"));
        }
        let mut call = script.prepare_invoke();
        for key in words(case.keys) {
            call.key(key);
        }
        for arg in words(case.args) {
            call.arg(arg);
        }
        let reply: Value = call.invoke(&mut conn).unwrap_or_else(|e| panic!("{name} case {i}: {e}"));
        assert_eq!(render(&reply), case.reply.replace('~', &prefix), "{name} case {i}: the reply");
        for (command, expected) in case.then {
            let got = query(&mut conn, &words(command)).unwrap_or_else(|e| panic!("{name} case {i}: {command}: {e}"));
            assert_eq!(render(&got), expected.replace('~', &prefix), "{name} case {i}: {command}");
        }
    }
}

fn query(conn: &mut redis::Connection, words: &[String]) -> redis::RedisResult<Value> {
    let Some((command, args)) = words.split_first() else { return Ok(Value::Nil) };
    redis::cmd(command).arg(args).query(conn)
}

fn render(value: &Value) -> String {
    match value {
        Value::Nil => "nil".into(),
        Value::Int(n) => n.to_string(),
        Value::BulkString(bytes) if bytes.is_empty() => "''".into(),
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(text) => text.clone(),
        Value::Okay => "OK".into(),
        Value::Array(items) => format!("[{}]", items.iter().map(render).collect::<Vec<_>>().join(", ")),
        other => format!("{other:?}"),
    }
}

#[test]
fn every_script_has_a_table_here() {
    let source: String = include_str!("lua_scripts.rs").split_whitespace().collect();
    let names: Vec<&str> = testing::scripts().into_iter().map(|(name, _)| name).collect();
    assert!(names.len() >= 46, "the catalog lists every script: {names:?}");
    for name in names {
        assert!(source.contains(&format!("run(\"{name}\"")), "{name} has no table in lua_scripts.rs");
    }
}

/// Rust files that hold Lua: none.
const LUA_STILL_IN_RUST: &[&str] = &[];

#[test]
fn no_lua_is_left_in_rust_files() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // Spelt in two, so this file does not hold what it looks for.
    let needles = [concat!("redis", ".call("), concat!("redis", ".pcall(")];
    let mut dirs = vec![root.clone()];
    let mut holding = Vec::new();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("readable dir") {
            let path = entry.expect("dir entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if path.is_dir() {
                if !name.starts_with('.') && name != "target" {
                    dirs.push(path);
                }
            } else if name.ends_with(".rs") {
                let text = std::fs::read_to_string(&path).expect("readable source");
                if needles.iter().any(|n| text.contains(n)) {
                    let relative = path.strip_prefix(&root).expect("under the root").to_string_lossy().replace('\\', "/");
                    holding.push(relative);
                }
            }
        }
    }
    holding.sort();
    assert_eq!(holding, LUA_STILL_IN_RUST, "Lua goes in lua/*.lua beside its module (see shared/queue/src/redis_lua.rs)");
}

// The task scripts (`shared/queue/src/queue/lua/`). A task hash `~t:{a}`; the
// channel prefix `~events:` (no feed: no `+`).

#[test]
fn create() {
    run(
        "queue/create",
        &[Case {
            given: &["HSET ~t:{b} status running"],
            keys: "~t:{a} ~t:{b}",
            args: r#"~events: {"type":"queued"} 1000 '' a "task_id":"a" {} acme '' 3 b "task_id":"b" {} acme '' 3"#,
            reply: "1",
            then: &[
                (
                    "HMGET ~t:{a} status attempt tenant max_attempts created_at seq e:1 batch trace",
                    r#"[queued, 0, acme, 3, 1000, 1, {"seq":1,"task_id":"a","type":"queued"}, nil, nil]"#,
                ),
                ("HGETALL ~t:{b}", "[status, running]"),
            ],
        }],
    );
}

#[test]
fn start() {
    run(
        "queue/start",
        &[Case {
            given: &[
                r#"HSET ~t:{a} status queued attempt 0 max_attempts 3 hdr "task_id":"a" spec {} tenant acme seq 1"#,
                r#"HSET ~t:{c} status running attempt 1 max_attempts 3 hdr "task_id":"c" spec {} tenant acme seq 2"#,
                r#"HSET ~t:{d} status running attempt 3 max_attempts 3 hdr "task_id":"d" spec {} tenant acme seq 4"#,
            ],
            keys: "~t:{a} ~t:{b} ~t:{c} ~t:{d}",
            args: r#"~events: {"type":"started"} 2000 w1 {"type":"cancelled"} {"type":"failed"} 60000 a '' 1-1 b '' 1-2 c '' 1-3 d 1 1-4"#,
            reply: "[[started, 1, {}, acme, '', ''], [gone], [duplicate], [dead, 3, acme]]",
            then: &[
                (
                    "HMGET ~t:{a} status attempt owner entry started_at seq e:2",
                    r#"[running, 1, w1, 1-1, 2000, 2, {"seq":2,"attempt":1,"task_id":"a","type":"started"}]"#,
                ),
                ("HMGET ~t:{c} status owner", "[running, nil]"),
                ("HMGET ~t:{d} status code e:5", r#"[failed, problem, {"seq":5,"task_id":"d","type":"failed"}]"#),
                ("TTL ~t:{d}", "60"),
            ],
        }],
    );
}

#[test]
fn finish() {
    run(
        "queue/finish",
        &[Case {
            given: &[
                "HSET ~t:{a} status running attempt 1 owner w1 seq 2 journal {}",
                "HSET ~t:{b} status running attempt 1 owner w2 seq 2 journal {}",
            ],
            keys: "~t:{a} ~t:{b}",
            args: concat!(
                r#"~events: 60000 a 1 w1 "task_id":"a","type":"succeeded"} succeeded done result {"x":1} 3000 acme '' "#,
                r#"b 1 w1 "task_id":"b","type":"succeeded"} succeeded done result {"x":1} 3000 acme ''"#
            ),
            reply: "[3, -1]",
            then: &[
                (
                    "HMGET ~t:{a} status code result finished_at seq e:3",
                    r#"[succeeded, done, {"x":1}, 3000, 3, {"seq":3,"task_id":"a","type":"succeeded"}]"#,
                ),
                ("TTL ~t:{a}", "60"),
                ("HEXISTS ~t:{a} journal", "0"),
                ("HMGET ~t:{b} status seq journal", "[running, 2, {}]"),
            ],
        }],
    );
}

#[test]
fn heartbeat() {
    let running = &["HSET ~t:{a} status running attempt 2 owner w1"];
    run(
        "queue/heartbeat",
        &[
            Case { given: running, keys: "~t:{a}", args: "2 w1", reply: "ok", then: &[] },
            Case {
                given: &["HSET ~t:{a} status waiting attempt 2 owner w1 cancel 1"],
                keys: "~t:{a}",
                args: "2 w1",
                reply: "cancel",
                then: &[],
            },
            Case { given: running, keys: "~t:{a}", args: "1 w1", reply: "fenced", then: &[] },
            Case {
                given: &["HSET ~t:{a} status succeeded attempt 2 owner w1"],
                keys: "~t:{a}",
                args: "2 w1",
                reply: "fenced",
                then: &[],
            },
        ],
    );
}

/// A task that attempt 1 of worker `w1` runs, at event 2.
const RUNNING: &[&str] = &[r#"HSET ~t:{a} status running attempt 1 owner w1 hdr "task_id":"a" tenant acme seq 2 max_attempts 3"#];

#[test]
fn emit() {
    run(
        "queue/emit",
        &[
            Case {
                given: RUNNING,
                keys: "~t:{a}",
                args: r#"~events: a {"type":"action"} 1000 1 w1 steps 4"#,
                reply: "3",
                then: &[("HMGET ~t:{a} seq steps e:3", r#"[3, 4, {"seq":3,"task_id":"a","type":"action"}]"#)],
            },
            Case {
                given: RUNNING,
                keys: "~t:{a}",
                args: r#"~events: a {"type":"action"} 1000 1 w2 steps 4"#,
                reply: "-1",
                then: &[("HMGET ~t:{a} seq steps", "[2, nil]")],
            },
        ],
    );
}

#[test]
fn retry() {
    run(
        "queue/retry",
        &[Case {
            given: &[RUNNING[0], "HSET ~t:{a} takeover 1 input {}"],
            keys: "~t:{a}",
            args: r#"~events: a {"type":"retrying"} 1000 1 w1 error boom"#,
            reply: "3",
            then: &[(
                "HMGET ~t:{a} status owner error takeover input e:3",
                r#"[queued, '', boom, nil, nil, {"seq":3,"task_id":"a","type":"retrying"}]"#,
            )],
        }],
    );
}

#[test]
fn requeue() {
    run(
        "queue/requeue",
        &[
            Case {
                given: RUNNING,
                keys: "~t:{a}",
                args: r#"~events: a {"type":"queued"} 1000 1 w1"#,
                reply: "3",
                then: &[("HMGET ~t:{a} status owner max_attempts", "[queued, '', 4]")],
            },
            Case { given: RUNNING, keys: "~t:{a}", args: r#"~events: a {"type":"queued"} 1000 2 w1"#, reply: "-1", then: &[] },
        ],
    );
}

#[test]
fn cancel() {
    let args = r#"~events: a {"type":"cancelled"} 1000 acme 60000"#;
    run(
        "queue/cancel",
        &[
            Case {
                given: &[r#"HSET ~t:{a} status queued tenant acme hdr "task_id":"a" seq 1"#],
                keys: "~t:{a}",
                args,
                reply: "now-cancelled",
                then: &[("HMGET ~t:{a} status code finished_at seq", "[cancelled, cancelled, 1000, 2]"), ("TTL ~t:{a}", "60")],
            },
            Case {
                given: RUNNING,
                keys: "~t:{a}",
                args,
                reply: "cancelling",
                then: &[("HMGET ~t:{a} status cancel", "[running, 1]")],
            },
            Case {
                given: RUNNING,
                keys: "~t:{a}",
                args: r#"~events: a {"type":"cancelled"} 1000 globex 60000"#,
                reply: "missing",
                then: &[("HEXISTS ~t:{a} cancel", "0")],
            },
            Case { given: &["HSET ~t:{a} status succeeded tenant acme"], keys: "~t:{a}", args, reply: "succeeded", then: &[] },
        ],
    );
}

#[test]
fn set_fields() {
    run(
        "queue/set_fields",
        &[
            Case { given: RUNNING, keys: "~t:{a}", args: "1 w1 sandbox s1", reply: "ok", then: &[("HGET ~t:{a} sandbox", "s1")] },
            Case {
                given: RUNNING,
                keys: "~t:{a}",
                args: "1 w2 sandbox s1",
                reply: "fenced",
                then: &[("HGET ~t:{a} sandbox", "nil")],
            },
        ],
    );
}

#[test]
fn journal() {
    let big = "x".repeat(flotilla_queue::queue::JOURNAL_MAX_BYTES + 1);
    let too_big = format!("1 w1 {big}");
    let waiting = &["HSET ~t:{a} status waiting attempt 1 owner w1 journal old"];
    run(
        "queue/journal",
        &[
            Case {
                given: RUNNING,
                keys: "~t:{a}",
                args: "1 w1 {\"steps\":3}",
                reply: "ok",
                then: &[("HGET ~t:{a} journal", "{\"steps\":3}")],
            },
            Case { given: waiting, keys: "~t:{a}", args: "1 w1 new", reply: "ok", then: &[("HGET ~t:{a} journal", "new")] },
            Case { given: waiting, keys: "~t:{a}", args: "1 w1 ''", reply: "ok", then: &[("HEXISTS ~t:{a} journal", "0")] },
            Case { given: waiting, keys: "~t:{a}", args: "2 w1 new", reply: "fenced", then: &[("HGET ~t:{a} journal", "old")] },
            Case { given: waiting, keys: "~t:{a}", args: "1 w2 new", reply: "fenced", then: &[("HGET ~t:{a} journal", "old")] },
            Case {
                given: &["HSET ~t:{a} status succeeded attempt 1 owner w1"],
                keys: "~t:{a}",
                args: "1 w1 new",
                reply: "fenced",
                then: &[("HEXISTS ~t:{a} journal", "0")],
            },
            Case { given: waiting, keys: "~t:{a}", args: &too_big, reply: "too_large", then: &[("HGET ~t:{a} journal", "old")] },
        ],
    );
}

#[test]
fn give_input() {
    run(
        "queue/give_input",
        &[
            Case {
                given: &["HSET ~t:{a} status waiting tenant acme"],
                keys: "~t:{a}",
                args: r#"acme {"answer":1}"#,
                reply: "accepted",
                then: &[("HGET ~t:{a} input", r#"{"answer":1}"#)],
            },
            Case {
                given: &["HSET ~t:{a} status waiting tenant acme takeover 1"],
                keys: "~t:{a}",
                args: "acme {}",
                reply: "taken over",
                then: &[],
            },
            Case { given: RUNNING, keys: "~t:{a}", args: "acme {}", reply: "running", then: &[("HEXISTS ~t:{a} input", "0")] },
            Case { given: RUNNING, keys: "~t:{a}", args: "globex {}", reply: "missing", then: &[] },
            // A parked task wakes, once: the second answer finds it queued.
            Case {
                given: &["HSET ~t:{a} status waiting tenant acme parked 1 park_lane 2 park_route any"],
                keys: "~t:{a}",
                args: "acme {}",
                reply: "unparked:2:any",
                then: &[("HMGET ~t:{a} status parked input", "[queued, woken, {}]")],
            },
            Case {
                given: &["HSET ~t:{a} status queued tenant acme parked woken"],
                keys: "~t:{a}",
                args: "acme {}",
                reply: "queued",
                then: &[],
            },
        ],
    );
}

#[test]
fn park() {
    let waiting = &["HSET ~t:{a} status waiting attempt 1 owner w1 max_attempts 3"];
    run(
        "queue/park",
        &[
            Case {
                given: waiting,
                keys: "~t:{a}",
                args: "1 w1 2 any",
                reply: "parked",
                then: &[("HMGET ~t:{a} status owner parked max_attempts park_lane park_route", "[waiting, '', 1, 4, 2, any]")],
            },
            Case {
                given: &["HSET ~t:{a} status waiting attempt 1 owner w1 max_attempts 3 input {}"],
                keys: "~t:{a}",
                args: "1 w1 2 any",
                reply: "queued",
                then: &[("HMGET ~t:{a} status owner parked", "[queued, '', nil]")],
            },
            Case {
                given: &["HSET ~t:{a} status waiting attempt 1 owner w1 cancel 1"],
                keys: "~t:{a}",
                args: "1 w1 2 any",
                reply: "cancel",
                then: &[("HMGET ~t:{a} status owner", "[waiting, w1]")],
            },
            Case { given: waiting, keys: "~t:{a}", args: "1 w2 2 any", reply: "fenced", then: &[("HGET ~t:{a} owner", "w1")] },
        ],
    );
}

#[test]
fn take_input() {
    run(
        "queue/take_input",
        &[
            Case {
                given: &[r#"HSET ~t:{a} status waiting attempt 1 owner w1 input {"answer":1} code waiting-for-human"#],
                keys: "~t:{a}",
                args: "1 w1",
                reply: r#"[input, {"answer":1}]"#,
                then: &[("HMGET ~t:{a} status input code", "[running, nil, nil]")],
            },
            Case {
                given: &["HSET ~t:{a} status waiting attempt 1 owner w1 input {} released 1"],
                keys: "~t:{a}",
                args: "1 w1",
                reply: "[release, {}]",
                then: &[("HMGET ~t:{a} status released", "[running, nil]")],
            },
            Case {
                given: &["HSET ~t:{a} status waiting attempt 1 owner w1"],
                keys: "~t:{a}",
                args: "1 w1",
                reply: "[none, '']",
                then: &[("HGET ~t:{a} status", "waiting")],
            },
            Case { given: RUNNING, keys: "~t:{a}", args: "1 w1", reply: "[fenced, '']", then: &[] },
            // Cancelled while parked: the attempt that took it up ends it.
            Case {
                given: &[r#"HSET ~t:{a} status waiting attempt 2 owner w1 halt 1 parked woken input {}"#],
                keys: "~t:{a}",
                args: "2 w1",
                reply: "[cancel, '']",
                then: &[("HMGET ~t:{a} cancel halt parked", "[1, nil, nil]")],
            },
        ],
    );
}

#[test]
fn takeover() {
    let args = r#"~events: a {"type":"takeover"} 1000 acme"#;
    run(
        "queue/takeover",
        &[
            Case {
                given: RUNNING,
                keys: "~t:{a}",
                args,
                reply: "taken",
                then: &[("HMGET ~t:{a} status code takeover seq", "[waiting, human-intervention, 1, 3]")],
            },
            Case {
                given: &["HSET ~t:{a} status waiting tenant acme takeover 1 seq 3"],
                keys: "~t:{a}",
                args,
                reply: "held",
                then: &[("HGET ~t:{a} seq", "3")],
            },
            Case { given: &["HSET ~t:{a} status queued tenant acme"], keys: "~t:{a}", args, reply: "queued", then: &[] },
        ],
    );
}

#[test]
fn release() {
    let args = r#"~events: a {"type":"released"} 1000 acme {"go":1}"#;
    run(
        "queue/release",
        &[
            Case {
                given: &[r#"HSET ~t:{a} status waiting tenant acme hdr "task_id":"a" takeover 1 seq 3"#],
                keys: "~t:{a}",
                args,
                reply: "released",
                then: &[("HMGET ~t:{a} takeover input released seq", r#"[nil, {"go":1}, 1, 4]"#)],
            },
            Case {
                given: &["HSET ~t:{a} status waiting tenant acme seq 3"],
                keys: "~t:{a}",
                args,
                reply: "not taken over",
                then: &[],
            },
        ],
    );
}

#[test]
fn revive() {
    let args = r#"~events: a {"type":"revived"} 1000 acme"#;
    run(
        "queue/revive",
        &[
            Case {
                given: &[
                    r#"HSET ~t:{a} status failed tenant acme hdr "task_id":"a" code problem error boom finished_at 900 seq 5"#,
                    "PEXPIRE ~t:{a} 60000",
                ],
                keys: "~t:{a}",
                args,
                reply: "requeued",
                then: &[
                    ("HMGET ~t:{a} status attempt owner code error finished_at seq", "[queued, 0, '', nil, nil, nil, 6]"),
                    ("TTL ~t:{a}", "-1"),
                ],
            },
            Case { given: &["HSET ~t:{a} status succeeded tenant acme"], keys: "~t:{a}", args, reply: "succeeded", then: &[] },
        ],
    );
}

#[test]
fn sweep_ended() {
    run(
        "queue/sweep_ended",
        &[Case {
            given: &[
                "XADD ~ended 1000-0 t a·b",
                "XADD ~ended 5000-0 t c",
                "HSET ~t:{a} status succeeded finished_at 900",
                "HSET ~t:{b} status queued",
                "HSET ~t:{c} status failed finished_at 4000",
            ],
            keys: "~ended",
            args: "2000 10 ~t:",
            reply: "1",
            then: &[("EXISTS ~t:{a}", "0"), ("EXISTS ~t:{b}", "1"), ("EXISTS ~t:{c}", "1"), ("XLEN ~ended", "1")],
        }],
    );
}

#[test]
fn sweep_finished() {
    run(
        "queue/sweep_finished",
        &[Case {
            given: &[
                "ZADD ~finished 900 a 950 b 5000 c",
                "HSET ~t:{a} status cancelled finished_at 900",
                "HSET ~t:{b} status running",
            ],
            keys: "~finished",
            args: "2000 10 ~t:",
            reply: "2",
            then: &[("EXISTS ~t:{a}", "0"), ("EXISTS ~t:{b}", "1"), ("ZRANGE ~finished 0 -1", "[c]")],
        }],
    );
}

// The scheduler's scripts (`fair_fn.lua` and the files after it): the shard
// base `~{f0}:`, tenant `acme` on route `scripted|none|`, its normal lane
// (index 2), group `g`; capabilities `none scripted ''`.

/// Acme with one entry (`1-1`, task `a`) queued in its normal lane, active.
const QUEUED_ONE: &[&str] = &[
    "XGROUP CREATE ~{f0}:t:acme:lane:normal:scripted|none| g 0 MKSTREAM",
    "XADD ~{f0}:t:acme:lane:normal:scripted|none| 1-1 t a",
    "HSET ~{f0}:t:acme queued 1 2:scripted|none| 1 weight 1 max 0 vt 0",
    "HSET ~{f0}:routes scripted|none| 1",
    "HSET ~{f0}:sched queued 1",
    "ZADD ~{f0}:active:scripted|none| 0 acme",
    "SADD ~{f0}:tenants acme",
];

/// Acme's entry `1-1` (task `a`) delivered to worker `w1` and not yet
/// acknowledged.
const DELIVERED_ONE: &[&str] = &[
    "XGROUP CREATE ~{f0}:t:acme:lane:normal:scripted|none| g 0 MKSTREAM",
    "XADD ~{f0}:t:acme:lane:normal:scripted|none| 1-1 t a",
    "XREADGROUP GROUP g w1 COUNT 1 STREAMS ~{f0}:t:acme:lane:normal:scripted|none| >",
    "HSET ~{f0}:t:acme queued 0 running 1 busy 1 2:scripted|none| 0 weight 1 max 0 vt 10000",
    "HSET ~{f0}:sched running 1",
    "SADD ~{f0}:busy acme",
    "SADD ~{f0}:tenants acme",
];

#[test]
fn enqueue() {
    run(
        "queue/enqueue",
        &[Case {
            given: &[],
            keys: "~{f0}:sched",
            args: "~{f0}: g 1000 acme 1 0 2 a 0 scripted|none| acme 1 0 2 b 5000 scripted|none|",
            reply: "1",
            then: &[
                ("HMGET ~{f0}:t:acme queued delayed delayed:normal weight max 2:scripted|none|", "[1, 1, 1, 1, 0, 1]"),
                ("XLEN ~{f0}:t:acme:lane:normal:scripted|none|", "1"),
                ("ZRANGE ~{f0}:due 0 -1 WITHSCORES", "[2:acme:scripted|none|:b, 5000]"),
                ("ZSCORE ~{f0}:active:scripted|none| acme", "0"),
                ("HMGET ~{f0}:sched queued delayed", "[1, 1]"),
                ("HGET ~{f0}:routes scripted|none|", "1"),
                ("SMEMBERS ~{f0}:tenants", "[acme]"),
                ("ZRANGE ~{f0}:wake 0 -1", "[ready]"),
            ],
        }],
    );
}

#[test]
fn set_settings() {
    run(
        "queue/set_settings",
        &[Case {
            given: &[],
            keys: "~{f0}:sched",
            args: "~{f0}: acme 2 5 3 globex 1 0 0",
            reply: "0",
            then: &[
                ("HMGET ~{f0}:t:acme weight max maxsb", "[2, 5, 3]"),
                ("HMGET ~{f0}:t:globex weight max maxsb", "[1, 0, nil]"),
                ("HGETALL ~{f0}:limits", "[acme, 5]"),
                ("ZRANGE ~{f0}:wake 0 -1", "[ready]"),
            ],
        }],
    );
}

#[test]
fn pause() {
    run(
        "queue/pause",
        &[Case {
            given: QUEUED_ONE,
            keys: "~{f0}:sched",
            args: "~{f0}: acme 9000",
            reply: "0",
            then: &[
                ("HGET ~{f0}:t:acme paused", "9000"),
                ("ZSCORE ~{f0}:paused acme", "9000"),
                ("ZSCORE ~{f0}:active:scripted|none| acme", "nil"),
            ],
        }],
    );
}

#[test]
fn claim_turns() {
    run(
        "queue/claim_turns",
        &[
            Case {
                given: QUEUED_ONE,
                keys: "~{f0}:sched",
                args: "~{f0}: g w1 5 none scripted ''",
                reply: "[[2, 1-1, a, acme, scripted|none|]]",
                then: &[
                    ("HMGET ~{f0}:t:acme queued running vt busy 2:scripted|none|", "[0, 1, 10000, 1, 0]"),
                    ("HMGET ~{f0}:sched queued running", "[0, 1]"),
                    ("ZSCORE ~{f0}:active:scripted|none| acme", "nil"),
                    ("SMEMBERS ~{f0}:busy", "[acme]"),
                    ("XPENDING ~{f0}:t:acme:lane:normal:scripted|none| g", "[1, 1-1, 1-1, [[w1, 1]]]"),
                ],
            },
            Case {
                given: QUEUED_ONE,
                keys: "~{f0}:sched",
                args: "~{f0}: g w1 5 none computer-use ''",
                reply: "[]",
                then: &[("HGET ~{f0}:t:acme queued", "1")],
            },
        ],
    );
}

#[test]
fn claim_and_start() {
    run(
        "queue/claim_and_start",
        &[Case {
            given: &[
                QUEUED_ONE[0],
                QUEUED_ONE[1],
                QUEUED_ONE[2],
                QUEUED_ONE[3],
                QUEUED_ONE[4],
                QUEUED_ONE[5],
                r#"HSET ~t:{a} status queued attempt 0 max_attempts 3 hdr "task_id":"a" spec {} tenant acme seq 1"#,
            ],
            keys: "~{f0}:sched",
            args: r#"~events: {"type":"started"} 2000 w1 {"type":"cancelled"} {"type":"failed"} 60000 g 5 ~t: ~{f0}: none scripted ''"#,
            reply: "[2, 1-1, a, acme, scripted|none|, started, 1, {}, acme, '', '']",
            then: &[
                ("HMGET ~t:{a} status attempt owner entry seq", "[running, 1, w1, 1-1, 2]"),
                ("HMGET ~{f0}:t:acme queued running", "[0, 1]"),
            ],
        }],
    );
}

#[test]
fn ack() {
    run(
        "queue/ack",
        &[Case {
            given: DELIVERED_ONE,
            keys: "~{f0}:sched ~{f0}:outcomes",
            args: "~{f0}: g acme scripted|none| 2 1-1 succeeded acme scripted|none| 2 1-1 succeeded",
            reply: "2",
            then: &[
                ("HGETALL ~{f0}:outcomes", "[succeeded, 1]"),
                ("HGET ~{f0}:t:acme running", "0"),
                ("HGET ~{f0}:sched running", "0"),
                ("SMEMBERS ~{f0}:trim", "[acme]"),
                ("XPENDING ~{f0}:t:acme:lane:normal:scripted|none| g", "[0, nil, nil, nil]"),
            ],
        }],
    );
}

#[test]
fn reclaim() {
    run(
        "queue/reclaim",
        &[
            Case {
                given: DELIVERED_ONE,
                keys: "~{f0}:sched",
                args: "~{f0}: g w2 0 5 none scripted ''",
                reply: "[[2, 1-1, a, acme, scripted|none|]]",
                then: &[
                    ("XPENDING ~{f0}:t:acme:lane:normal:scripted|none| g", "[1, 1-1, 1-1, [[w2, 1]]]"),
                    ("HGET ~{f0}:t:acme running", "1"),
                ],
            },
            Case {
                given: DELIVERED_ONE,
                keys: "~{f0}:sched",
                args: "~{f0}: g w2 60000 5 none scripted ''",
                reply: "[]",
                then: &[("XPENDING ~{f0}:t:acme:lane:normal:scripted|none| g", "[1, 1-1, 1-1, [[w1, 1]]]")],
            },
        ],
    );
}

#[test]
fn promote() {
    run(
        "queue/promote",
        &[Case {
            given: &[
                "ZADD ~{f0}:due 500 2:acme:scripted|none|:a 5000 2:acme:scripted|none|:b",
                "HSET ~{f0}:t:acme delayed 2 delayed:normal 2 sandboxed 1 weight 1 max 0",
                "HSET ~{f0}:sched delayed 2",
                "ZADD ~{f0}:kept 900 acme:local:s1",
                "ZADD ~{f0}:paused 800 globex",
                "HSET ~{f0}:t:globex paused 800",
            ],
            keys: "~{f0}:sched",
            args: "~{f0}: g 1000 10",
            reply: "1",
            then: &[
                ("XLEN ~{f0}:t:acme:lane:normal:scripted|none|", "1"),
                ("HMGET ~{f0}:t:acme queued delayed delayed:normal sandboxed 2:scripted|none|", "[1, 1, 1, 0, 1]"),
                ("HMGET ~{f0}:sched queued delayed", "[1, 1]"),
                ("ZRANGE ~{f0}:due 0 -1", "[2:acme:scripted|none|:b]"),
                ("ZSCORE ~{f0}:active:scripted|none| acme", "0"),
                ("ZCARD ~{f0}:kept", "0"),
                ("ZCARD ~{f0}:paused", "0"),
                ("HEXISTS ~{f0}:t:globex paused", "0"),
                ("ZRANGE ~{f0}:wake 0 -1", "[ready]"),
            ],
        }],
    );
}

#[test]
fn trim() {
    run(
        "queue/trim",
        &[Case {
            given: &[
                // One entry a node, so whole nodes can go.
                "CONFIG SET stream-node-max-entries 1",
                "XGROUP CREATE ~{f0}:t:acme:lane:normal:scripted|none| g 0 MKSTREAM",
                "XADD ~{f0}:t:acme:lane:normal:scripted|none| 1-1 t a",
                "XADD ~{f0}:t:acme:lane:normal:scripted|none| 1-2 t b",
                "XADD ~{f0}:t:acme:lane:normal:scripted|none| 1-3 t c",
                "XREADGROUP GROUP g w1 COUNT 3 STREAMS ~{f0}:t:acme:lane:normal:scripted|none| >",
                "XACK ~{f0}:t:acme:lane:normal:scripted|none| g 1-1 1-2 1-3",
                "HSET ~{f0}:t:acme 2:scripted|none| 0",
                "SADD ~{f0}:trim acme",
            ],
            keys: "~{f0}:sched",
            args: "~{f0}: g",
            reply: "2",
            then: &[("XLEN ~{f0}:t:acme:lane:normal:scripted|none|", "1"), ("EXISTS ~{f0}:trim", "0")],
        }],
    );
}

#[test]
fn forget_gone_consumers() {
    run(
        "queue/forget_gone_consumers",
        &[Case {
            given: &[
                "XGROUP CREATE ~{f0}:t:acme:lane:normal:scripted|none| g 0 MKSTREAM",
                "XGROUP CREATECONSUMER ~{f0}:t:acme:lane:normal:scripted|none| g gone",
                "HSET ~{f0}:t:acme 2:scripted|none| 0",
                "SADD ~{f0}:tenants acme",
            ],
            keys: "~{f0}:sched",
            args: "~{f0}: g -1",
            reply: "[gone]",
            then: &[("XINFO CONSUMERS ~{f0}:t:acme:lane:normal:scripted|none| g", "[]")],
        }],
    );
}

#[test]
fn defer() {
    run(
        "queue/defer",
        &[Case {
            given: &[],
            keys: "~{f0}:sched",
            args: "~{f0}: acme 2 a 5000 scripted|none|",
            reply: "0",
            then: &[
                ("ZRANGE ~{f0}:due 0 -1 WITHSCORES", "[2:acme:scripted|none|:a, 5000]"),
                ("HMGET ~{f0}:t:acme delayed delayed:normal", "[1, 1]"),
                ("HGET ~{f0}:sched delayed", "1"),
            ],
        }],
    );
}

#[test]
fn finish_and_ack() {
    run(
        "queue/finish_and_ack",
        &[Case {
            given: &[
                DELIVERED_ONE[0],
                DELIVERED_ONE[1],
                DELIVERED_ONE[2],
                DELIVERED_ONE[3],
                DELIVERED_ONE[4],
                "HSET ~t:{a} status running attempt 1 owner w1 seq 2",
            ],
            keys: "~{f0}:sched ~{f0}:outcomes ~ended ~t:{a}",
            args: concat!(
                "~events: 60000 g 1 ~{f0}: ~usage: :2026-11-29 86400 '' ",
                "1 w1 succeeded done result acme '' scripted|none| 2 ",
                r#"1 a 1 "task_id":"a","type":"succeeded"} 3000 1-1 {"x":1}"#
            ),
            reply: "[3]",
            then: &[
                (
                    "HMGET ~t:{a} status code result finished_at e:3",
                    r#"[succeeded, done, {"x":1}, 3000, {"seq":3,"task_id":"a","type":"succeeded"}]"#,
                ),
                ("TTL ~t:{a}", "-1"),
                ("HGETALL ~{f0}:outcomes", "[succeeded, 1]"),
                ("HGET ~usage:acme:2026-11-29 tasks:succeeded", "1"),
                ("TTL ~usage:acme:2026-11-29", "86400"),
                ("XLEN ~ended", "1"),
                ("HGET ~{f0}:t:acme running", "0"),
                ("XPENDING ~{f0}:t:acme:lane:normal:scripted|none| g", "[0, nil, nil, nil]"),
            ],
        }],
    );
}

#[test]
fn submit_singles() {
    run(
        "queue/submit_singles",
        &[Case {
            given: &[],
            keys: "~{f0}:sched ~{f0}:t:acme ~rate:acme ~admitting:acme ~tasks:acme ~tenants ~usage:acme ~t:{a} ~t:{b}",
            args: concat!(
                r#"~events: {"type":"queued"} 1000 acme 0 1 1 '' ~{f0}: g 1 0 "#,
                r#"a "task_id":"a" {} 3 '' 2 0 scripted|none| b "task_id":"b" {} 3 '' 2 0 scripted|none|"#
            ),
            reply: "[[ok, -1, 0], [queued, 1, 0]]",
            then: &[
                ("HMGET ~t:{a} status tenant seq", "[queued, acme, 1]"),
                ("EXISTS ~t:{b}", "0"),
                ("ZRANGE ~tasks:acme 0 -1", "[a]"),
                ("SMEMBERS ~tenants", "[acme]"),
                ("XLEN ~{f0}:t:acme:lane:normal:scripted|none|", "1"),
                ("HMGET ~{f0}:t:acme queued weight", "[1, 1]"),
            ],
        }],
    );
}

#[test]
fn add_usage() {
    run(
        "queue/add_usage",
        &[
            Case {
                given: RUNNING,
                keys: "~t:{a} ~usage:acme:day ~usage:acme:total",
                args: "1 w1 86400 100 5000 tokens 10 cost_micros 700",
                reply: r#"[{"tokens":10,"cost_micros":700}, 10, 700]"#,
                then: &[
                    ("HGET ~t:{a} meter", r#"{"tokens":10,"cost_micros":700}"#),
                    ("HGET ~usage:acme:day tokens", "10"),
                    ("HGET ~usage:acme:day cost_micros", "700"),
                    ("TTL ~usage:acme:day", "86400"),
                    ("HGET ~usage:acme:total tokens", "10"),
                ],
            },
            Case {
                given: RUNNING,
                keys: "~t:{a} ~usage:acme:day",
                args: "1 w2 86400 100 0 tokens 10",
                reply: "[fenced, -1, -1]",
                then: &[("EXISTS ~usage:acme:day", "0")],
            },
        ],
    );
}

#[test]
fn keep_sandbox() {
    run(
        "queue/keep_sandbox",
        &[
            Case {
                given: QUEUED_ONE,
                keys: "~{f0}:sched",
                args: "~{f0}: acme local:s1 5000 set",
                reply: "1",
                then: &[("ZSCORE ~{f0}:kept acme:local:s1", "5000"), ("HGET ~{f0}:t:acme sandboxed", "1")],
            },
            Case {
                given: &["ZADD ~{f0}:kept 5000 acme:local:s1", "HSET ~{f0}:t:acme sandboxed 1"],
                keys: "~{f0}:sched",
                args: "~{f0}: acme local:s1 4000 hold",
                reply: "0",
                then: &[("ZSCORE ~{f0}:kept acme:local:s1", "5000"), ("HGET ~{f0}:t:acme sandboxed", "1")],
            },
        ],
    );
}

#[test]
fn forget_sandbox() {
    run(
        "queue/forget_sandbox",
        &[
            Case {
                given: &["ZADD ~{f0}:kept 5000 acme:local:s1", "HSET ~{f0}:t:acme sandboxed 1"],
                keys: "~{f0}:sched",
                args: "~{f0}: acme local:s1",
                reply: "1",
                then: &[("ZCARD ~{f0}:kept", "0"), ("HGET ~{f0}:t:acme sandboxed", "0")],
            },
            Case {
                given: &[],
                keys: "~{f0}:sched",
                args: "~{f0}: acme local:s1",
                reply: "0",
                then: &[("EXISTS ~{f0}:t:acme", "0")],
            },
        ],
    );
}

#[test]
fn lift_pause() {
    run(
        "queue/lift_pause",
        &[
            Case {
                given: &["HSET ~{f0}:t:acme paused 9000", "ZADD ~{f0}:paused 9000 acme"],
                keys: "~{f0}:sched",
                args: "~{f0}: acme",
                reply: "1",
                then: &[("HEXISTS ~{f0}:t:acme paused", "0"), ("ZCARD ~{f0}:paused", "0"), ("ZRANGE ~{f0}:wake 0 -1", "[ready]")],
            },
            Case { given: &[], keys: "~{f0}:sched", args: "~{f0}: acme", reply: "0", then: &[] },
        ],
    );
}

#[test]
fn feed_append() {
    run(
        "queue/feed_append",
        &[
            Case {
                given: &["SET ~fed:a 2"],
                keys: "~feed ~fed:a",
                args: r#"60000 check 2 {"seq":2} 3 {"seq":3}"#,
                reply: "3",
                then: &[("XLEN ~feed", "1"), ("GET ~fed:a", "3"), ("TTL ~fed:a", "60")],
            },
            Case {
                given: &["SET ~fed:a 2"],
                keys: "~feed ~fed:a",
                args: r#"60000 check 4 {"seq":4}"#,
                reply: "-3",
                then: &[("EXISTS ~feed", "0"), ("GET ~fed:a", "2")],
            },
            Case {
                given: &["SET ~fed:a 2"],
                keys: "~feed ~fed:a",
                args: r#"60000 fill 4 {"seq":4}"#,
                reply: "4",
                then: &[("XLEN ~feed", "1")],
            },
        ],
    );
}

// The archive pass (`shared/queue/src/queue/archive/lua/`).

#[test]
fn move_task() {
    run(
        "archive/move_task",
        &[
            Case {
                given: &["HSET ~t:{a} seq 5"],
                keys: "~t:{a} ~archived:acme",
                args: "5 77 a",
                reply: "1",
                then: &[("EXISTS ~t:{a}", "0"), ("ZSCORE ~archived:acme a", "77")],
            },
            Case {
                given: &["HSET ~t:{a} seq 6"],
                keys: "~t:{a} ~archived:acme",
                args: "5 77 a",
                reply: "0",
                then: &[("EXISTS ~t:{a}", "1"), ("EXISTS ~archived:acme", "0")],
            },
        ],
    );
}

#[test]
fn mark_feed() {
    let feed: &[&str] = &["XADD ~feed 5-0 e x", "XADD ~feed 6-0 e x", "XADD ~feed 7-0 e x"];
    run(
        "archive/mark_feed",
        &[
            Case {
                given: feed,
                keys: "~mark ~feed",
                args: "6 0",
                reply: "2",
                then: &[("GET ~mark", "6-0"), ("XLEN ~feed", "1")],
            },
            Case {
                given: &[feed[0], feed[1], feed[2], "SET ~mark 9-0"],
                keys: "~mark ~feed",
                args: "6 0",
                reply: "3",
                then: &[("GET ~mark", "9-0"), ("XLEN ~feed", "0")],
            },
        ],
    );
}

#[test]
fn end_turn() {
    run(
        "archive/end_turn",
        &[
            Case { given: &["SET ~turn p1"], keys: "~turn", args: "p1", reply: "1", then: &[("EXISTS ~turn", "0")] },
            Case { given: &["SET ~turn p2"], keys: "~turn", args: "p1", reply: "0", then: &[("GET ~turn", "p2")] },
        ],
    );
}

// Admission (`shared/queue/src/lua/admit.lua`): no rate, a full queue, spent
// tokens, a rate of one a second.

#[test]
fn admit() {
    run(
        "quota/admit",
        &[
            Case {
                given: &["HSET ~{f0}:t:acme queued 2 delayed 1"],
                keys: "~{f0}:t:acme ~rate:acme ~admitting:acme",
                args: "2 0 1 10 r1 120000 0",
                reply: "[ok, -1, 0]",
                then: &[("ZRANGE ~admitting:acme 0 -1", "[r1:2]"), ("EXISTS ~rate:acme", "0")],
            },
            Case {
                given: &["HSET ~{f0}:t:acme queued 9"],
                keys: "~{f0}:t:acme ~rate:acme ~admitting:acme",
                args: "2 0 1 10 r1 120000 0",
                reply: "[queued, 9, 0]",
                then: &[("EXISTS ~admitting:acme", "0")],
            },
            Case {
                given: &["HSET ~usage:acme tokens 100"],
                keys: "~{f0}:t:acme ~rate:acme ~admitting:acme ~usage:acme",
                args: "1 0 1 10 r1 120000 100",
                reply: "[tokens, 100, 0]",
                then: &[],
            },
            Case {
                given: &[],
                keys: "~{f0}:t:acme ~rate:acme ~admitting:acme",
                args: "1 1000000 1 10 r1 120000 0",
                reply: "[ok, 0, 1]",
                then: &[("EXISTS ~rate:acme", "1")],
            },
        ],
    );
}

// Schedules (`shared/queue/src/schedule/lua/`).

#[test]
fn schedule_create() {
    run(
        "schedule/create",
        &[Case {
            given: &[],
            keys: "~s:{1} ~due ~schedules:acme",
            args: "1 5000 tenant acme cron *·*·*·*·*",
            reply: "1",
            then: &[
                ("HGETALL ~s:{1}", "[tenant, acme, cron, * * * * *]"),
                ("ZSCORE ~due 1", "5000"),
                ("ZSCORE ~schedules:acme 1", "0"),
            ],
        }],
    );
}

#[test]
fn schedule_update() {
    run(
        "schedule/update",
        &[
            Case {
                given: &["HSET ~s:{1} tenant acme", "ZADD ~due 5000 1"],
                keys: "~s:{1} ~due",
                args: "1 acme 7000 paused 0",
                reply: "1",
                then: &[("HGET ~s:{1} paused", "0"), ("ZSCORE ~due 1", "7000")],
            },
            Case {
                given: &["HSET ~s:{1} tenant acme pending 5000", "ZADD ~due 15000 1"],
                keys: "~s:{1} ~due",
                args: "1 acme 7000 paused 0",
                reply: "1",
                then: &[("ZSCORE ~due 1", "15000")],
            },
            Case {
                given: &["HSET ~s:{1} tenant acme", "ZADD ~due 5000 1"],
                keys: "~s:{1} ~due",
                args: "1 acme '' paused 1",
                reply: "1",
                then: &[("ZSCORE ~due 1", "nil")],
            },
            Case {
                given: &["HSET ~s:{1} tenant acme"],
                keys: "~s:{1} ~due",
                args: "1 globex 7000 paused 0",
                reply: "0",
                then: &[("HEXISTS ~s:{1} paused", "0")],
            },
        ],
    );
}

#[test]
fn schedule_delete() {
    let kept: &[&str] = &["HSET ~s:{1} tenant acme", "ZADD ~due 5000 1", "ZADD ~schedules:acme 0 1"];
    run(
        "schedule/delete",
        &[
            Case {
                given: kept,
                keys: "~s:{1} ~due ~schedules:acme",
                args: "1 acme",
                reply: "1",
                then: &[("EXISTS ~s:{1}", "0"), ("EXISTS ~due", "0"), ("EXISTS ~schedules:acme", "0")],
            },
            Case {
                given: kept,
                keys: "~s:{1} ~due ~schedules:acme",
                args: "1 globex",
                reply: "0",
                then: &[("EXISTS ~s:{1}", "1"), ("ZSCORE ~due 1", "5000")],
            },
        ],
    );
}

#[test]
fn schedule_claim_due() {
    let due: &[&str] = &["HSET ~s:{1} next_due 5000", "ZADD ~due 5000 1"];
    run(
        "schedule/claim_due",
        &[
            Case {
                given: due,
                keys: "~s:{1} ~due",
                args: "1 5000 6000 5000 0 15000",
                reply: "1",
                then: &[("HMGET ~s:{1} next_due pending", "[6000, 5000]"), ("ZSCORE ~due 1", "15000")],
            },
            Case {
                given: due,
                keys: "~s:{1} ~due",
                args: "1 5000 6000 5000 1 15000",
                reply: "1",
                then: &[
                    ("HMGET ~s:{1} next_due last_skipped_due skipped pending", "[6000, 5000, 1, nil]"),
                    ("ZSCORE ~due 1", "6000"),
                ],
            },
            Case {
                given: due,
                keys: "~s:{1} ~due",
                args: "1 4000 6000 4000 0 15000",
                reply: "0",
                then: &[("HGET ~s:{1} next_due", "5000"), ("ZSCORE ~due 1", "5000")],
            },
        ],
    );
}

#[test]
fn schedule_record_run() {
    run(
        "schedule/record_run",
        &[
            Case {
                given: &["HSET ~s:{1} next_due 6000 pending 5000", "ZADD ~due 15000 1"],
                keys: "~s:{1} ~due",
                args: "1 5000 a",
                reply: "1",
                then: &[("HMGET ~s:{1} pending last_due last_task", "['', 5000, a]"), ("ZSCORE ~due 1", "6000")],
            },
            Case {
                given: &["HSET ~s:{1} next_due 6000 pending ''", "ZADD ~due 6000 1"],
                keys: "~s:{1} ~due",
                args: "1 5000 a",
                reply: "0",
                then: &[("HEXISTS ~s:{1} last_task", "0")],
            },
        ],
    );
}

// Webhook messages (`shared/queue/src/webhooks/lua/`).

#[test]
fn create_messages() {
    run(
        "webhooks/create_messages",
        &[Case {
            given: &["HSET ~m:{m0} tenant acme"],
            keys: "~endpoints ~m:{m0} ~due:e1 ~log:e1 ~m:{m1} ~due:e1 ~log:e1 ~m:{m2} ~due:e1 ~log:e1",
            args: "1000 60000 1 acme m0 e1 task.ended {} m1 e1 task.ended {} m2 e1 task.ended {}",
            reply: "2",
            then: &[
                ("HMGET ~m:{m1} tenant endpoint type status attempts next_at", "[acme, e1, task.ended, pending, 0, 1000]"),
                ("ZRANGE ~due:e1 0 -1", "[m1, m2]"),
                ("ZCARD ~log:e1", "1"),
                ("ZSCORE ~endpoints e1", "1000"),
                ("HGETALL ~m:{m0}", "[tenant, acme]"),
            ],
        }],
    );
}

#[test]
fn take_due() {
    run(
        "webhooks/take_due",
        &[Case {
            given: &["ZADD ~endpoints 100 e1", "ZADD ~due:e1 100 m1 200 m2"],
            keys: "~endpoints",
            args: "1000 61000 31000 10 1 256 ~",
            reply: "[e1, m1]",
            then: &[
                ("ZRANGE ~due:e1 0 -1 WITHSCORES", "[m2, 200, m1, 61000]"),
                ("ZRANGE ~inflight:e1 0 -1 WITHSCORES", "[m1, 31000]"),
                ("ZSCORE ~endpoints e1", "31000"),
            ],
        }],
    );
}

#[test]
fn release_due() {
    run(
        "webhooks/release_due",
        &[
            Case {
                given: &["ZADD ~due:e1 61000 m1", "ZADD ~inflight:e1 31000 m1", "ZADD ~endpoints 31000 e1"],
                keys: "~due:e1 ~inflight:e1 ~endpoints",
                args: "m1 e1 ''",
                reply: "1",
                then: &[("EXISTS ~due:e1", "0"), ("EXISTS ~inflight:e1", "0"), ("EXISTS ~endpoints", "0")],
            },
            Case {
                given: &["ZADD ~due:e1 61000 m1", "ZADD ~inflight:e1 31000 m1", "ZADD ~endpoints 31000 e1"],
                keys: "~due:e1 ~inflight:e1 ~endpoints",
                args: "m1 e1 9000",
                reply: "1",
                then: &[("ZSCORE ~due:e1 m1", "9000"), ("ZSCORE ~endpoints e1", "9000")],
            },
        ],
    );
}

// The sandbox fleet's cap (`worker/src/sandbox/lua/`): a sorted set of
// slots scored by when their lease ends, read against the server's clock.

#[test]
fn fleet_take() {
    let script = redis::Script::new(include_str!("../../../worker/src/sandbox/lua/fleet_take.lua"));
    run_script(
        "fleet_take",
        &script,
        &[
            Case {
                given: &["ZADD ~s 1 expired"],
                keys: "~s",
                args: "a 1 60000",
                reply: "1",
                then: &[("ZCARD ~s", "1"), ("ZRANK ~s a", "0")],
            },
            Case { given: &["ZADD ~s 99999999999999 b"], keys: "~s", args: "a 1 60000", reply: "0", then: &[("ZCARD ~s", "1")] },
            Case { given: &["ZADD ~s 99999999999999 a"], keys: "~s", args: "a 1 60000", reply: "1", then: &[("ZCARD ~s", "1")] },
        ],
    );
}

#[test]
fn fleet_renew() {
    let script = redis::Script::new(include_str!("../../../worker/src/sandbox/lua/fleet_renew.lua"));
    run_script(
        "fleet_renew",
        &script,
        &[Case { given: &["ZADD ~s 99999999999999 a"], keys: "~s", args: "60000 a b", reply: "1", then: &[("ZCARD ~s", "2")] }],
    );
}

#[test]
fn fleet_count() {
    let script = redis::Script::new(include_str!("../../../worker/src/sandbox/lua/fleet_count.lua"));
    run_script(
        "fleet_count",
        &script,
        &[Case { given: &["ZADD ~s 1 expired", "ZADD ~s 99999999999999 live"], keys: "~s", args: "", reply: "1", then: &[] }],
    );
}
