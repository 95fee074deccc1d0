//! The worker's side of sandboxes: the provider trait and types
//! (`flotilla-sandbox`) and the backends (`flotilla-desktop`,
//! `flotilla-e2b`) re-exported under one name, and what the worker builds
//! on them: the warm pool sized by demand, the fleet-wide cap, keeping
//! leased sandboxes alive, opening a template's apps, and the in-memory fake for tests above providers.

pub mod apps;
mod demand;
pub mod fleet;
pub mod keep_alive;
#[cfg(any(test, feature = "memory-sandbox"))]
pub mod memory;
pub mod pool;
mod pool_fill;

#[cfg(test)]
mod e2b_standard_tests;
#[cfg(test)]
mod e2b_stream_tests;
#[cfg(test)]
mod e2b_tests;

pub use flotilla_desktop as local;
pub use flotilla_e2b as e2b;
#[cfg(test)]
pub(crate) use flotilla_sandbox::suite;
pub use flotilla_sandbox::{
    keyboard, settle, CommandOutput, GatewayBridge, PortStream, Sandbox, SandboxError, SandboxId, SandboxProvider,
    SandboxRequest, SandboxStatus, Screenshot, X11Display,
};

pub use e2b::{E2bConfig, E2bProvider, EnvdAddress, StreamKey};
pub use fleet::{FleetCap, FleetCapConfig, FleetSlot};
pub use flotilla_queue::sandbox_owners::SandboxOwners;
pub use keep_alive::{KeepAlive, KeepAlivePolicy, SandboxLost};
pub use local::{DisplayAccess, Ipv4Net, Isolation, Leftovers, LocalConfig, LocalProvider, Network, SandboxLimits};
#[cfg(any(test, feature = "memory-sandbox"))]
pub use memory::MemoryProvider;
pub use pool::{Lease, PoolConfig, PooledShape, SandboxPool};
