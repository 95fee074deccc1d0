//! The fleet under faults against one redis-server: see
//! `flotilla_tests::scenarios`.

use flotilla_tests::scenarios;
use flotilla_tests::RedisServer;

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_workers_tasks_are_reclaimed_and_each_task_ends_once() {
    scenarios::a_killed_workers_tasks_are_reclaimed_and_each_task_ends_once(RedisServer::start()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_worker_cannot_overwrite_the_attempt_that_replaced_it() {
    scenarios::a_frozen_worker_cannot_overwrite_the_attempt_that_replaced_it(RedisServer::start()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn tasks_survive_a_redis_restart_and_workers_recover_by_themselves() {
    scenarios::tasks_survive_a_redis_restart_and_workers_recover_by_themselves(RedisServer::start_with_aof()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_drains_running_tasks_then_exits() {
    scenarios::sigterm_drains_running_tasks_then_exits(RedisServer::start()).await;
}
