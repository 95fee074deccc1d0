//! Opening, focusing and restarting a template's apps in a running sandbox,
//! through the provider's `run` (so it works on local desktops and E2B
//! alike): the app's command starts detached when no window of its class is
//! mapped, then its window is waited for (up to a deadline) and activated
//! with `xdotool`. Restarting stops the app's program first, for changes
//! that must be made while it is down (a browser profile written back).

use std::time::Duration;

use flotilla_config::{App, Template};

use super::{SandboxError, SandboxId, SandboxProvider};

/// How long an app's window may take to appear once started.
pub const APP_WINDOW_WAIT: Duration = Duration::from_secs(20);
/// How long a stopped app may take to go.
const APP_STOP_WAIT: Duration = Duration::from_secs(5);

/// Why an app could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenAppError {
    /// The template has no app by that name.
    #[error("template {template:?} has no app {app:?}; it has {available}")]
    NotInTemplate { template: String, app: String, available: String },
    /// The app started but its window did not appear in time.
    #[error("app {app:?} did not open a window: {detail}")]
    NoWindow { app: String, detail: String },
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
}

/// The app of `template` the planner named `name`, or why there is none.
pub fn find_app<'t>(template: &'t Template, name: &str) -> Result<&'t App, OpenAppError> {
    template.app(name).ok_or_else(|| OpenAppError::NotInTemplate {
        template: template.name.clone(),
        app: name.to_owned(),
        available: template.apps.iter().map(|a| a.name.as_str()).collect::<Vec<_>>().join(", "),
    })
}

/// Starts `app` in sandbox `id` unless its window is already mapped, waits
/// for the window and focuses it. Returns the window's id (as `xdotool`
/// prints it).
pub async fn open_app(provider: &dyn SandboxProvider, id: &SandboxId, app: &App) -> Result<String, OpenAppError> {
    let wait_s = u32::try_from(APP_WINDOW_WAIT.as_secs()).unwrap_or(u32::MAX);
    let script = with_env(app.open_script(wait_s));
    let output = provider.run(id, &script, APP_WINDOW_WAIT + Duration::from_secs(5)).await?;
    if output.exit_code != 0 {
        let detail = output.stderr.lines().last().unwrap_or("").trim().to_owned();
        return Err(OpenAppError::NoWindow { app: app.name.clone(), detail: format!("exit {}: {detail}", output.exit_code) });
    }
    Ok(output.stdout.trim().to_owned())
}

/// Stops `app`'s program in sandbox `id` and waits for it to go.
pub async fn stop_app(provider: &dyn SandboxProvider, id: &SandboxId, app: &App) -> Result<(), OpenAppError> {
    let wait_s = u32::try_from(APP_STOP_WAIT.as_secs()).unwrap_or(u32::MAX);
    provider.run(id, &app.stop_script(wait_s), APP_STOP_WAIT + Duration::from_secs(5)).await?;
    Ok(())
}

/// Stops `app`, runs `while_down` (e.g. writing its profile back), then
/// opens it again.
pub async fn restart_app<F, Fut>(
    provider: &dyn SandboxProvider,
    id: &SandboxId,
    app: &App,
    while_down: F,
) -> Result<String, OpenAppError>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<(), SandboxError>>,
{
    stop_app(provider, id, app).await?;
    while_down().await?;
    open_app(provider, id, app).await
}

/// The script with `DISPLAY` defaulted, for providers whose `run` does not
/// set it (E2B's desktop runs its display at `:0`).
fn with_env(script: String) -> String {
    format!("export DISPLAY=\"${{DISPLAY:-:0}}\"; {script}")
}
