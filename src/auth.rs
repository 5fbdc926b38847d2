//! Who is calling: bearer tokens for two roles, agents (execute, validate, read their own
//! executions) and operators (list, approve, deny, read all). Tokens are kept only as SHA-256
//! digests and compared in constant time against every credential.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Agent,
    Operator,
}

/// One configured token: `name:token` in the environment, or `{name, token}` / `{name, sha256}`
/// in the config file (the digest form keeps the token itself out of the file).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

impl fmt::Debug for TokenSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenSpec")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl TokenSpec {
    /// The same spec with the token (or digest) masked, for `config show`.
    pub fn masked(&self) -> TokenSpec {
        TokenSpec {
            name: self.name.clone(),
            token: self.token.as_ref().map(|_| "***".to_string()),
            sha256: self.sha256.as_ref().map(|_| "***".to_string()),
        }
    }
}

/// Accepts `"name:token,name2:token2"` (environment) or a list of tables (config file).
pub fn token_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<TokenSpec>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Text(String),
        List(Vec<TokenSpec>),
    }
    match Raw::deserialize(d)? {
        Raw::List(list) => Ok(list),
        Raw::Text(text) => text
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|item| {
                let (name, token) = item
                    .split_once(':')
                    .ok_or_else(|| serde::de::Error::custom("each token is `name:token`"))?;
                Ok(TokenSpec {
                    name: name.trim().to_string(),
                    token: Some(token.trim().to_string()),
                    sha256: None,
                })
            })
            .collect(),
    }
}

#[derive(Clone)]
struct Credential {
    name: String,
    role: Role,
    digest: [u8; 32],
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credential")
            .field("name", &self.name)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

/// The authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub name: String,
    roles: Vec<Role>,
}

impl Caller {
    pub fn is(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }

    /// An agent that is trusted by construction (the stdio MCP server's local client).
    pub fn local_agent(name: impl Into<String>) -> Caller {
        Caller {
            name: name.into(),
            roles: vec![Role::Agent],
        }
    }

    /// Everyone, when authentication is off (loopback development).
    pub fn anonymous() -> Caller {
        Caller {
            name: "anonymous".into(),
            roles: vec![Role::Agent, Role::Operator],
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("missing bearer token (Authorization: Bearer <token>)")]
    Missing,
    #[error("invalid token")]
    Invalid,
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct AuthConfigError(pub String);

/// The configured credentials; `None` means authentication is off.
#[derive(Debug, Clone)]
pub struct Authenticator {
    credentials: Option<Vec<Credential>>,
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl Authenticator {
    /// Builds the credentials. No tokens at all is allowed only on a loopback address, or with
    /// `insecure_no_auth`.
    pub fn new(
        agents: &[TokenSpec],
        operators: &[TokenSpec],
        loopback: bool,
        insecure_no_auth: bool,
    ) -> Result<Self, AuthConfigError> {
        let mut credentials = Vec::new();
        for (specs, role) in [(agents, Role::Agent), (operators, Role::Operator)] {
            for spec in specs {
                credentials.push(credential(spec, role)?);
            }
        }
        if credentials.is_empty() {
            if loopback || insecure_no_auth {
                return Ok(Authenticator { credentials: None });
            }
            return Err(AuthConfigError(
                "refusing to serve on a non-loopback address without tokens: set SCRIPTGATE_AGENT_TOKENS and SCRIPTGATE_OPERATOR_TOKENS (name:token,…), or pass --insecure-no-auth".into(),
            ));
        }
        Ok(Authenticator {
            credentials: Some(credentials),
        })
    }

    pub fn enabled(&self) -> bool {
        self.credentials.is_some()
    }

    /// The caller for an `Authorization` header value.
    pub fn authenticate(&self, header: Option<&str>) -> Result<Caller, AuthError> {
        let Some(credentials) = &self.credentials else {
            return Ok(Caller::anonymous());
        };
        let token = header
            .and_then(|h| {
                h.strip_prefix("Bearer ")
                    .or_else(|| h.strip_prefix("bearer "))
            })
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or(AuthError::Missing)?;
        let presented = digest(token);
        // Every credential is compared (no early exit), in constant time.
        let mut roles = Vec::new();
        let mut name = None;
        for c in credentials {
            if bool::from(c.digest.ct_eq(&presented)) {
                roles.push(c.role);
                name.get_or_insert_with(|| c.name.clone());
            }
        }
        match name {
            Some(name) => Ok(Caller { name, roles }),
            None => Err(AuthError::Invalid),
        }
    }
}

fn credential(spec: &TokenSpec, role: Role) -> Result<Credential, AuthConfigError> {
    let bad = |m: &str| AuthConfigError(format!("token `{}`: {m}", spec.name));
    if spec.name.is_empty()
        || !spec
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@'))
    {
        return Err(bad("names use letters, digits, '-', '_', '.', '@'"));
    }
    let digest = match (&spec.token, &spec.sha256) {
        (Some(token), None) => {
            if token.len() < 16 {
                return Err(bad("tokens must be at least 16 characters"));
            }
            digest(token)
        }
        (None, Some(hex_digest)) => {
            let bytes =
                hex::decode(hex_digest.trim()).map_err(|_| bad("sha256 must be 64 hex digits"))?;
            bytes
                .try_into()
                .map_err(|_| bad("sha256 must be 64 hex digits"))?
        }
        _ => return Err(bad("give exactly one of `token` and `sha256`")),
    };
    Ok(Credential {
        name: spec.name.clone(),
        role,
        digest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, token: &str) -> TokenSpec {
        TokenSpec {
            name: name.into(),
            token: Some(token.into()),
            sha256: None,
        }
    }

    #[test]
    fn tokens_map_to_their_names_and_roles() {
        let op_digest = hex::encode(digest("operator-token-0123456789"));
        let auth = Authenticator::new(
            &[spec("bot", "agent-token-0123456789")],
            &[TokenSpec {
                name: "alice".into(),
                token: None,
                sha256: Some(op_digest),
            }],
            false,
            false,
        )
        .expect("valid");
        let bot = auth
            .authenticate(Some("Bearer agent-token-0123456789"))
            .expect("agent");
        assert_eq!(bot.name, "bot");
        assert!(bot.is(Role::Agent) && !bot.is(Role::Operator));
        let alice = auth
            .authenticate(Some("Bearer operator-token-0123456789"))
            .expect("operator");
        assert!(alice.is(Role::Operator) && !alice.is(Role::Agent));
        assert_eq!(auth.authenticate(None), Err(AuthError::Missing));
        assert_eq!(auth.authenticate(Some("Basic x")), Err(AuthError::Missing));
        assert_eq!(
            auth.authenticate(Some("Bearer nope")),
            Err(AuthError::Invalid)
        );
    }

    #[test]
    fn no_tokens_is_only_allowed_on_loopback_or_explicitly() {
        assert!(
            !Authenticator::new(&[], &[], true, false)
                .expect("loopback")
                .enabled()
        );
        assert!(Authenticator::new(&[], &[], false, false).is_err());
        assert!(
            !Authenticator::new(&[], &[], false, true)
                .expect("insecure")
                .enabled()
        );
    }

    #[test]
    fn environment_lists_parse_and_weak_tokens_are_refused() {
        #[derive(Deserialize)]
        struct W {
            #[serde(deserialize_with = "token_list")]
            t: Vec<TokenSpec>,
        }
        let w: W =
            serde_json::from_str(r#"{"t": "a:tok-aaaaaaaaaaaaaaaa, b:tok-bbbbbbbbbbbbbbbb"}"#)
                .expect("parses");
        assert_eq!(w.t.len(), 2);
        assert_eq!(w.t[1].name, "b");
        assert!(Authenticator::new(&[spec("x", "short")], &[], true, false).is_err());
        let masked = spec("x", "secret-secret-secret").masked();
        assert_eq!(masked.token.as_deref(), Some("***"));
    }
}
