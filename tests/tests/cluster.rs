//! The fleet's fault scenarios against a local three-master Redis Cluster:
//! every key a script touches shares one slot, so nothing answers CROSSSLOT.

use flotilla_tests::scenarios;
use flotilla_tests::RedisCluster;

#[tokio::test(flavor = "multi_thread")]
async fn on_a_cluster_a_killed_workers_tasks_are_reclaimed_and_each_task_ends_once() {
    scenarios::a_killed_workers_tasks_are_reclaimed_and_each_task_ends_once(RedisCluster::start()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn on_a_cluster_a_frozen_worker_cannot_overwrite_the_attempt_that_replaced_it() {
    scenarios::a_frozen_worker_cannot_overwrite_the_attempt_that_replaced_it(RedisCluster::start()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn on_a_cluster_tasks_survive_a_restart_and_workers_recover_by_themselves() {
    scenarios::tasks_survive_a_redis_restart_and_workers_recover_by_themselves(RedisCluster::start()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn on_a_cluster_sigterm_drains_running_tasks_then_exits() {
    scenarios::sigterm_drains_running_tasks_then_exits(RedisCluster::start()).await;
}
