//! The queue's role handles: what each part of the fleet may do with it,
//! one handle per role, borrowed from the [`Queue`] for a call or a few.
//!
//! - [`Submitter`] — the API's writes: submits, batches, cancels, input,
//!   revivals, takeovers, admission.
//! - [`Reader`] — gets, lists, events, feeds, stats and usage.
//! - [`Runner`] — a worker's task path beside its attempts: claiming,
//!   starting, finishing and acknowledging, usage, kept sandboxes.
//! - [`Housekeeper`] — promotion of due tasks, trims, sweeps, the archive
//!   pass, the feed relay, tenant settings.
//!
//! Every method that reads or writes tasks lives on one of them (or on an
//! [`super::Attempt`], or the claim seam [`super::Claimer`]); the queue
//! itself only connects and hands them out. Only this crate implements
//! them. A handle dereferences to its queue, so the queue's own helpers
//! serve every role.

use std::ops::Deref;

use super::Queue;

macro_rules! role {
    ($(#[$doc:meta])* $name:ident, $accessor:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy)]
        pub struct $name<'q>(&'q Queue);

        impl Deref for $name<'_> {
            type Target = Queue;

            fn deref(&self) -> &Queue {
                self.0
            }
        }

        impl Queue {
            $(#[$doc])*
            pub fn $accessor(&self) -> $name<'_> {
                $name(self)
            }
        }
    };
}

role!(
    /// The API's writes.
    Submitter,
    submitter
);
role!(
    /// Reads of tasks, batches, events, feeds, stats and usage.
    Reader,
    reader
);
role!(
    /// A worker's task path beside its attempts.
    Runner,
    runner
);
role!(
    /// Promotion, trims, sweeps, the archive pass, the feed relay.
    Housekeeper,
    housekeeper
);
