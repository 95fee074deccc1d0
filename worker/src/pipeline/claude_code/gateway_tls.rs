//! The gateway's TLS credentials in a sandbox that calls its TCP listener
//! (E2B, or a local sandbox outside a jail): the gateway authority's
//! certificate, and the client certificate and key the task's token is bound
//! to, written under `.flotilla/gateway/` in the sandbox's home before the
//! CLI starts. The CLI finds them through `NODE_EXTRA_CA_CERTS`,
//! `CLAUDE_CODE_CLIENT_CERT` and `CLAUDE_CODE_CLIENT_KEY`. A token on a
//! sandbox's own socket needs none of this.

use super::workdir::Sandbox;
use crate::gateway::TaskToken;
use crate::pipeline::PipelineError;

/// The gateway authority's certificate, relative to the sandbox's home.
const CA_FILE: &str = ".flotilla/gateway/ca.pem";
/// The client certificate the token is bound to.
const CERT_FILE: &str = ".flotilla/gateway/client.pem";
/// Its private key.
const KEY_FILE: &str = ".flotilla/gateway/client-key.pem";

/// The CLI's variables naming each file, by its path relative to the home.
pub(super) const ENV: [(&str, &str); 3] =
    [("NODE_EXTRA_CA_CERTS", CA_FILE), ("CLAUDE_CODE_CLIENT_CERT", CERT_FILE), ("CLAUDE_CODE_CLIENT_KEY", KEY_FILE)];

/// Writes the token's credentials into the sandbox, when it has any.
pub(super) async fn install(sandbox: Sandbox<'_>, token: &TaskToken) -> Result<(), PipelineError> {
    let Some(credentials) = token.client_credentials() else { return Ok(()) };
    sandbox.write(CA_FILE, credentials.ca_pem.as_bytes()).await?;
    sandbox.write(CERT_FILE, credentials.cert_pem.as_bytes()).await?;
    sandbox.write(KEY_FILE, credentials.key_pem.expose().as_bytes()).await
}
