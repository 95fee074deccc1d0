//! Loading the templates: the built-ins (`templates_builtin.rs`) changed and
//! added to by the file's `[templates.<name>]` tables, each checked, and
//! the check that every app's programs are installed.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::templates::{App, Template, TemplateFile, DEFAULT_TEMPLATE};
use super::ConfigError;

/// Every template this process knows: the built-ins and the file's tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplatesConfig {
    templates: BTreeMap<String, Template>,
}

impl Default for TemplatesConfig {
    fn default() -> Self {
        let templates = super::templates_builtin::builtins().into_iter().map(|t| (t.name.clone(), t)).collect();
        Self { templates }
    }
}

/// A `[templates.<name>]` table: every key optional, so a table named after
/// a built-in changes only what it lists.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TemplateTable {
    apps: Option<Vec<App>>,
    env: Option<BTreeMap<String, String>>,
    files: Option<Vec<TemplateFile>>,
    locale: Option<String>,
    time_zone: Option<String>,
    packages: Option<Vec<String>>,
    e2b_template: Option<String>,
}

impl TemplatesConfig {
    /// The built-ins, changed and added to by the file's `templates` table.
    pub(super) fn load(table: Option<toml::Value>) -> Result<Self, ConfigError> {
        let mut config = Self::default();
        let Some(value) = table else { return Ok(config) };
        let toml::Value::Table(tables) = value else {
            return Err(ConfigError::new("templates", "must be a table of [templates.<name>] tables"));
        };
        for (name, value) in tables {
            let var = format!("templates.{name}");
            if !valid_name(&name) {
                return Err(ConfigError::new(&var, "a template's name is 1-64 of a-z 0-9 - _"));
            }
            let table: TemplateTable =
                serde_path_to_error::deserialize(value).map_err(|e| table_error(&var, e.path().to_string(), e.inner()))?;
            let template = config.templates.remove(&name).unwrap_or_else(|| Template::empty(&name));
            let template = table.apply(template);
            template.validate()?;
            config.templates.insert(name, template);
        }
        Ok(config)
    }

    /// Templates given directly (over the built-ins), for tests and tools.
    pub fn with(templates: impl IntoIterator<Item = Template>) -> Self {
        let mut config = Self::default();
        config.templates.extend(templates.into_iter().map(|t| (t.name.clone(), t)));
        config
    }

    /// The template named `name`, if there is one.
    pub fn get(&self, name: &str) -> Option<&Template> {
        self.templates.get(name)
    }

    /// The template of a task naming `name`, or the default one.
    pub fn resolve(&self, name: Option<&str>) -> Option<&Template> {
        self.get(name.unwrap_or(DEFAULT_TEMPLATE))
    }

    pub fn iter(&self) -> impl Iterator<Item = &Template> {
        self.templates.values()
    }

    /// The first template whose app needs a program `found` says is
    /// missing, as one line: `template "browser": app "chromium" needs
    /// chromium, which is not installed (scripts/setup.sh installs it)`.
    pub fn check_installed(&self, found: impl Fn(&str) -> bool) -> Result<(), String> {
        for template in self.iter() {
            if let Some((app, program)) = template.missing_programs(&found).into_iter().next() {
                return Err(format!(
                    "template {:?}: app {app:?} needs {program}, which is not installed (scripts/setup.sh installs it)",
                    template.name
                ));
            }
        }
        Ok(())
    }
}

/// Whether `program` is on the host's `PATH` (or, with a slash, exists).
pub fn program_on_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let executable =
        |path: &std::path::Path| std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if program.contains('/') {
        return executable(std::path::Path::new(program));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path).any(|dir| executable(&dir.join(program)))
}

impl TemplateTable {
    fn apply(self, mut template: Template) -> Template {
        if let Some(apps) = self.apps {
            template.apps = apps;
        }
        if let Some(env) = self.env {
            template.env = env;
        }
        if let Some(files) = self.files {
            template.files = files;
        }
        if let Some(locale) = self.locale {
            template.locale = locale;
        }
        if let Some(time_zone) = self.time_zone {
            template.time_zone = time_zone;
        }
        if let Some(packages) = self.packages {
            template.packages = packages;
        }
        if self.e2b_template.is_some() {
            template.e2b_template = self.e2b_template;
        }
        template
    }
}

impl Template {
    fn validate(&self) -> Result<(), ConfigError> {
        let var = |key: &str| format!("templates.{}.{key}", self.name);
        for app in &self.apps {
            if !valid_name(&app.name) || app.command.trim().is_empty() || app.window_class.trim().is_empty() {
                return Err(ConfigError::new(
                    &var("apps"),
                    format!("app {:?} needs a name (a-z 0-9 - _), a command and a window_class", app.name),
                ));
            }
        }
        for file in &self.files {
            let bad = file.path.is_empty()
                || file.path.starts_with('/')
                || file.path.split('/').any(|part| part == ".." || part.is_empty())
                || file.path.contains('\0');
            if bad {
                return Err(ConfigError::new(&var("files"), format!("{:?} is not a path inside the home", file.path)));
            }
        }
        for key in self.env.keys() {
            let ok = !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok
                || key.starts_with("FLOTILLA_")
                || matches!(key.as_str(), "HOME" | "DISPLAY" | "XAUTHORITY" | "PATH" | "TMPDIR")
            {
                return Err(ConfigError::new(&var("env"), format!("{key:?} cannot be set by a template")));
            }
        }
        let plain = |text: &str| !text.is_empty() && text.chars().all(|c| c.is_ascii_alphanumeric() || "._-/+@".contains(c));
        if !plain(&self.locale) {
            return Err(ConfigError::new(&var("locale"), format!("{:?} is not a locale name", self.locale)));
        }
        if !plain(&self.time_zone) {
            return Err(ConfigError::new(&var("time_zone"), format!("{:?} is not a time zone name", self.time_zone)));
        }
        Ok(())
    }
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

fn table_error(var: &str, path: String, error: &toml::de::Error) -> ConfigError {
    let message = error.message().trim().to_owned();
    match path.as_str() {
        "" | "." => ConfigError::new(var, message),
        _ => ConfigError::new(&format!("{var}.{path}"), message),
    }
}

#[cfg(test)]
#[path = "templates_tests.rs"]
mod tests;
