//! The fleet's fault scenarios against a local three-master Redis Cluster:
//! every key a script touches shares one slot, so nothing answers CROSSSLOT.
//! The schedule scenarios run here too, with several replicas racing.

use flotilla_tests::RedisCluster;
use flotilla_tests::{scenarios, schedule_scenarios};

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

#[tokio::test(flavor = "multi_thread")]
async fn on_a_cluster_each_due_time_yields_exactly_one_task_however_many_replicas_race() {
    schedule_scenarios::each_due_time_yields_exactly_one_task_however_many_replicas_race(RedisCluster::start()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn on_a_cluster_overlap_skip_leaves_out_runs_while_the_previous_task_is_active() {
    schedule_scenarios::overlap_skip_leaves_out_runs_while_the_previous_task_is_active(RedisCluster::start()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn on_a_cluster_a_paused_schedule_fires_nothing_and_a_resumed_one_counts_from_now() {
    schedule_scenarios::a_paused_schedule_fires_nothing_and_a_resumed_one_counts_from_now(RedisCluster::start()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn on_a_cluster_a_time_zone_is_honoured_in_summer_and_in_winter() {
    schedule_scenarios::a_time_zone_is_honoured_in_summer_and_in_winter(RedisCluster::start()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn on_a_cluster_daylight_saving_days_fire_a_daily_run_once() {
    schedule_scenarios::daylight_saving_days_fire_a_daily_run_once(RedisCluster::start()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn on_a_cluster_after_an_outage_only_the_latest_missed_run_fires() {
    schedule_scenarios::after_an_outage_only_the_latest_missed_run_fires(RedisCluster::start()).await;
}
