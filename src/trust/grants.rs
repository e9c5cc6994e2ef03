//! Grants: which verified principals may invoke which operations of a
//! worker. Routing does not grant access: a command addressed to an agent
//! is handled only when its verified signer holds a grant for the
//! operation.
//!
//! A grant is `PRINCIPAL:OPERATION`, split at the first `:`; either side is
//! a name, `*` (anything) or a prefix ending in `*` (`planner-*`). A command
//! without an operation is matched by an operation pattern `*` only.
//!
//! Delegation: a command whose metadata carries `on_behalf_of` acts for that
//! user, and the effective grant is the **intersection** of the signer's
//! grants and the user's: both must hold a grant for the operation.
//!
//! ```
//! use agdx::trust::Grants;
//! use agdx::wire::AgentId;
//! let grants: Grants = ["ops:*", "planner:summarize", "alice:summarize"].iter().map(|g| g.parse()).collect::<Result<_, _>>()?;
//! let planner = AgentId::new("planner")?;
//! assert!(grants.allows(&planner, Some("summarize")));
//! assert!(!grants.allows(&planner, Some("delete")));
//! // planner acting for alice: both hold `summarize`.
//! assert!(grants.admit(&planner, Some("alice"), Some("summarize")).is_ok());
//! // planner acting for bob: bob holds nothing, so the intersection is empty.
//! assert!(grants.admit(&planner, Some("bob"), Some("summarize")).is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::Path;
use std::str::FromStr;

use agdx_wire::AgentId;

/// A name, `*`, or a prefix ending in `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    Any,
    Prefix(String),
    Exact(String),
}

impl Pattern {
    fn parse(text: &str) -> Self {
        match text.strip_suffix('*') {
            Some("") => Pattern::Any,
            Some(prefix) => Pattern::Prefix(prefix.to_owned()),
            None => Pattern::Exact(text.to_owned()),
        }
    }

    fn matches(&self, value: Option<&str>) -> bool {
        match (self, value) {
            (Pattern::Any, _) => true,
            (Pattern::Prefix(prefix), Some(v)) => v.starts_with(prefix.as_str()),
            (Pattern::Exact(name), Some(v)) => v == name,
            (_, None) => false,
        }
    }
}

/// One grant: a principal pattern and an operation pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    text: String,
    principal: Pattern,
    operation: Pattern,
}

impl Grant {
    fn allows(&self, principal: &str, operation: Option<&str>) -> bool {
        self.principal.matches(Some(principal)) && self.operation.matches(operation)
    }
}

impl std::fmt::Display for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// Text that is not a grant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a grant: write PRINCIPAL:OPERATION, e.g. `ops:*` or `planner:summarize` (`*` and a trailing `*` match many)"
)]
pub struct GrantParseError(pub String);

impl FromStr for Grant {
    type Err = GrantParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let text = s.trim();
        let (principal, operation) = text
            .split_once(':')
            .filter(|(p, o)| !p.is_empty() && !o.is_empty())
            .ok_or_else(|| GrantParseError(s.to_owned()))?;
        Ok(Grant {
            text: text.to_owned(),
            principal: Pattern::parse(principal),
            operation: Pattern::parse(operation),
        })
    }
}

/// Why a command was refused by the grants.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Forbidden {
    /// The signer holds no grant for the operation.
    #[error("forbidden: '{principal}' holds no grant for operation '{operation}'")]
    Signer {
        /// The verified signer.
        principal: AgentId,
        /// The operation asked for.
        operation: String,
    },
    /// The signer acts for a user who holds no grant for the operation.
    #[error(
        "forbidden: '{principal}' acts on behalf of '{user}', who holds no grant for operation '{operation}' (a delegated command needs both grants)"
    )]
    User {
        /// The verified signer.
        principal: AgentId,
        /// The user it acts for (`on_behalf_of`).
        user: String,
        /// The operation asked for.
        operation: String,
    },
}

/// Why a grants file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum GrantsFileError {
    /// The file could not be read.
    #[error("grants file {}: {source}", path.display())]
    Io {
        /// The grants file.
        path: std::path::PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A line is not a grant.
    #[error("grants file {}, line {line}: {source}", path.display())]
    Line {
        /// The grants file.
        path: std::path::PathBuf,
        /// The line number, from 1.
        line: usize,
        /// What is wrong with it.
        source: GrantParseError,
    },
}

/// A worker's grants: which principals may invoke which operations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    grants: Vec<Grant>,
}

impl FromIterator<Grant> for Grants {
    fn from_iter<I: IntoIterator<Item = Grant>>(iter: I) -> Self {
        Self {
            grants: iter.into_iter().collect(),
        }
    }
}

impl Grants {
    /// Reads grants from a file: one `PRINCIPAL:OPERATION` per line; blank
    /// lines and lines starting with `#` are skipped.
    pub fn load(path: &Path) -> Result<Self, GrantsFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| GrantsFileError::Io {
            path: path.to_owned(),
            source,
        })?;
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
            .map(|(i, l)| {
                l.parse().map_err(|source| GrantsFileError::Line {
                    path: path.to_owned(),
                    line: i + 1,
                    source,
                })
            })
            .collect()
    }

    /// Adds grants.
    pub fn extend(&mut self, more: impl IntoIterator<Item = Grant>) {
        self.grants.extend(more);
    }

    /// The grants, in the order given.
    pub fn iter(&self) -> impl Iterator<Item = &Grant> {
        self.grants.iter()
    }

    /// Whether `principal` holds a grant for `operation`.
    pub fn allows(&self, principal: &AgentId, operation: Option<&str>) -> bool {
        self.allows_name(principal.as_str(), operation)
    }

    fn allows_name(&self, principal: &str, operation: Option<&str>) -> bool {
        self.grants.iter().any(|g| g.allows(principal, operation))
    }

    /// Admits a command from the verified `principal`, acting on behalf of
    /// `user` when it says so: both must hold a grant for `operation`.
    pub fn admit(
        &self,
        principal: &AgentId,
        user: Option<&str>,
        operation: Option<&str>,
    ) -> Result<(), Forbidden> {
        let named = || operation.unwrap_or("(none)").to_owned();
        if !self.allows(principal, operation) {
            return Err(Forbidden::Signer {
                principal: principal.clone(),
                operation: named(),
            });
        }
        if let Some(user) = user
            && !self.allows_name(user, operation)
        {
            return Err(Forbidden::User {
                principal: principal.clone(),
                user: user.to_owned(),
                operation: named(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(list: &[&str]) -> Grants {
        list.iter().map(|g| g.parse().unwrap()).collect()
    }

    fn agent(name: &str) -> AgentId {
        AgentId::new(name).unwrap()
    }

    #[test]
    fn patterns_match_names_prefixes_and_anything() {
        let g = grants(&["ops:*", "planner-*:summarize", "bot:report-*"]);
        assert!(g.allows(&agent("ops"), Some("anything")));
        assert!(
            g.allows(&agent("ops"), None),
            "`*` covers a command without an operation"
        );
        assert!(g.allows(&agent("planner-7"), Some("summarize")));
        assert!(!g.allows(&agent("planner-7"), Some("delete")));
        assert!(
            !g.allows(&agent("planner"), Some("summarize")),
            "the prefix is `planner-`"
        );
        assert!(g.allows(&agent("bot"), Some("report-daily")));
        assert!(!g.allows(&agent("bot"), None));
        assert!(!g.allows(&agent("opsx"), Some("anything")));
    }

    #[test]
    fn delegation_needs_both_the_signer_and_the_user_to_hold_the_grant() {
        let g = grants(&[
            "planner:summarize",
            "planner:translate",
            "alice:summarize",
            "alice:delete",
        ]);
        let planner = agent("planner");
        // In both grants: admitted.
        assert_eq!(g.admit(&planner, Some("alice"), Some("summarize")), Ok(()));
        // The signer may, the user may not.
        assert_eq!(
            g.admit(&planner, Some("alice"), Some("translate")),
            Err(Forbidden::User {
                principal: planner.clone(),
                user: "alice".into(),
                operation: "translate".into()
            })
        );
        // The user may, the signer may not: delegation adds no rights.
        assert_eq!(
            g.admit(&planner, Some("alice"), Some("delete")),
            Err(Forbidden::Signer {
                principal: planner.clone(),
                operation: "delete".into()
            })
        );
        // Without delegation only the signer's grants count.
        assert_eq!(g.admit(&planner, None, Some("translate")), Ok(()));
    }

    #[test]
    fn bad_grants_are_refused_with_the_form_to_use() {
        for bad in ["ops", ":x", "ops:", ""] {
            let error = bad.parse::<Grant>().unwrap_err().to_string();
            assert!(error.contains("PRINCIPAL:OPERATION"), "{error}");
        }
    }

    #[test]
    fn a_grants_file_skips_comments_and_names_a_bad_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grants");
        std::fs::write(&path, "# operators\nops:*\n\nplanner:summarize\n").unwrap();
        assert_eq!(
            Grants::load(&path).unwrap(),
            grants(&["ops:*", "planner:summarize"])
        );
        std::fs::write(&path, "ops:*\nplanner\n").unwrap();
        let error = Grants::load(&path).unwrap_err().to_string();
        assert!(error.contains("line 2"), "{error}");
    }
}
