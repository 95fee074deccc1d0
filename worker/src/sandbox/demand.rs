//! How many ready sandboxes the warm pool should hold to keep up with the
//! tasks arriving now.
//!
//! Each task served from the pool starts a replacement, which takes the
//! provider's start time `c`. With tasks arriving at rate `λ`, the
//! replacements under way at any moment are about Poisson-distributed with
//! mean `λ·c`, and a task finds the pool empty when all `W` of the pool's
//! places are being refilled. So the pool wants the smallest `W` with
//! `P(N ≥ W) ≤` [`MISS_BUDGET`]. `λ` is counted over the last
//! [`WINDOW`]; `c` is a moving average of recent starts.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How far back arrivals count towards the rate.
pub(crate) const WINDOW: Duration = Duration::from_secs(30);
/// The shortest span a rate is computed over, so a pool's first few
/// arrivals do not read as a flood.
const MIN_SPAN: Duration = Duration::from_secs(5);
/// The share of arrivals the pool may leave without a ready sandbox.
pub(crate) const MISS_BUDGET: f64 = 0.05;
/// How much each new start time moves the average.
const SMOOTHING: f64 = 0.3;
/// The most arrivals remembered; more within the window add nothing a pool
/// of any size could use.
const MAX_REMEMBERED: usize = 4096;

/// Recent arrivals and start times of one pool.
#[derive(Debug)]
pub(crate) struct Demand {
    since: Instant,
    arrivals: VecDeque<Instant>,
    start_s: Option<f64>,
}

impl Demand {
    pub fn new(now: Instant) -> Self {
        Self { since: now, arrivals: VecDeque::new(), start_s: None }
    }

    /// A task asked for the pool's shape at `now`.
    pub fn arrived(&mut self, now: Instant) {
        self.forget_before(now);
        if self.arrivals.len() == MAX_REMEMBERED {
            self.arrivals.pop_front();
        }
        self.arrivals.push_back(now);
    }

    /// A sandbox of the pool's shape took `took` to start.
    pub fn started(&mut self, took: Duration) {
        let seconds = took.as_secs_f64();
        self.start_s = Some(match self.start_s {
            Some(average) => average + SMOOTHING * (seconds - average),
            None => seconds,
        });
    }

    /// Arrivals per second over the window.
    pub fn rate(&mut self, now: Instant) -> f64 {
        self.forget_before(now);
        let span = now.saturating_duration_since(self.since).clamp(MIN_SPAN, WINDOW);
        self.arrivals.len() as f64 / span.as_secs_f64()
    }

    /// Ready sandboxes that keep misses within the budget; 0 before any
    /// start time is known.
    pub fn wanted(&mut self, now: Instant) -> usize {
        let Some(start_s) = self.start_s else { return 0 };
        places_for(self.rate(now) * start_s, MISS_BUDGET)
    }

    fn forget_before(&mut self, now: Instant) {
        while self.arrivals.front().is_some_and(|at| now.saturating_duration_since(*at) > WINDOW) {
            self.arrivals.pop_front();
        }
    }
}

/// The smallest `w` with `P(N ≥ w) ≤ miss` for `N` Poisson with `mean`.
pub(crate) fn places_for(mean: f64, miss: f64) -> usize {
    if mean.is_nan() || mean <= 0.0 {
        return 0;
    }
    let (mut term, mut below) = ((-mean).exp(), 0.0);
    for w in 0..1_000 {
        below += term;
        if 1.0 - below <= miss {
            return w + 1;
        }
        term *= mean / (w + 1) as f64;
    }
    1_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_follow_the_poisson_tail() {
        assert_eq!(places_for(0.0, MISS_BUDGET), 0);
        assert_eq!(places_for(f64::NAN, MISS_BUDGET), 0);
        // P(N ≥ 1) = 1 − e^−0.03 ≈ 3 %.
        assert_eq!(places_for(0.03, MISS_BUDGET), 1);
        // P(N ≥ 1) ≈ 26 %, P(N ≥ 2) ≈ 3.7 %.
        assert_eq!(places_for(0.3, MISS_BUDGET), 2);
        // P(N ≥ 3) ≈ 8 %, P(N ≥ 4) ≈ 1.9 %.
        assert_eq!(places_for(1.0, MISS_BUDGET), 4);
        assert!(places_for(20.0, MISS_BUDGET) > 20);
    }

    #[test]
    fn the_rate_counts_the_window_only() {
        let t0 = Instant::now();
        let mut demand = Demand::new(t0);
        for i in 0..30 {
            demand.arrived(t0 + Duration::from_secs(i));
        }
        let at = t0 + Duration::from_secs(30);
        assert!((demand.rate(at) - 1.0).abs() < 0.05, "{}", demand.rate(at));
        assert_eq!(demand.rate(at + WINDOW + Duration::from_secs(1)), 0.0, "all forgotten");
    }

    #[test]
    fn early_arrivals_do_not_read_as_a_flood() {
        let t0 = Instant::now();
        let mut demand = Demand::new(t0);
        demand.arrived(t0 + Duration::from_millis(100));
        assert!(demand.rate(t0 + Duration::from_millis(200)) <= 0.2);
    }

    #[test]
    fn wanted_grows_with_rate_and_start_time() {
        let t0 = Instant::now();
        let mut demand = Demand::new(t0);
        for i in 0..60 {
            demand.arrived(t0 + Duration::from_millis(500 * i));
        }
        let at = t0 + Duration::from_secs(30);
        assert_eq!(demand.wanted(at), 0, "no start time known yet");
        demand.started(Duration::from_millis(150));
        assert_eq!(demand.wanted(at), 2, "2/s × 0.15 s");
        for _ in 0..20 {
            demand.started(Duration::from_millis(500));
        }
        assert_eq!(demand.wanted(at), 4, "2/s × 0.5 s");
    }
}
