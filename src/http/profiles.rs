//! `GET /v1/profiles`: the runner profiles a request may name, with what their images hold.

use std::collections::BTreeMap;

use axum::extract::State;
use serde::Serialize;

use super::AppState;
use super::auth::Authenticated;
use super::error::ErrorBody;
use crate::domain::script::Language;

/// One runner profile.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub(super) struct ProfileOut {
    pub name: String,
    pub description: String,
    pub languages: Vec<Language>,
    /// The image runs use (the Python one when they differ per language).
    pub image: String,
    /// Its content id now (`sha256:…`); null when the image is missing.
    pub image_digest: Option<String>,
    /// The image is present: runs in this profile can start.
    pub available: bool,
    /// Python version recorded when the image was built (null for images built without
    /// `scriptgate images build`).
    pub python_version: Option<String>,
    /// Python distribution versions recorded when the image was built.
    pub packages: BTreeMap<String, String>,
    /// Modules warm interpreters have imported before the script arrives.
    pub preimport: Vec<String>,
    /// Figures come back as PNG artifacts.
    pub plots: bool,
    /// Warm containers kept per language, and how many are waiting now.
    pub pool_size: usize,
    pub pool_ready: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub(super) struct ProfilesOut {
    /// The profile of requests that name none.
    pub default: String,
    pub profiles: Vec<ProfileOut>,
}

#[utoipa::path(
    get,
    path = "/v1/profiles",
    tag = "execute",
    operation_id = "list_profiles",
    responses(
        (status = 200, description = "Every runner profile, with languages and the Python and package versions recorded when its image was built.", body = ProfilesOut),
        (status = 401, description = "No or an unknown token.", body = ErrorBody),
    ),
    security(("agent_token" = []), ("operator_token" = []))
)]
pub(super) async fn list(
    State(state): State<AppState>,
    _caller: Authenticated,
) -> axum::Json<ProfilesOut> {
    let statuses = state.executions.profile_status().await;
    let profiles = state
        .profiles
        .all()
        .iter()
        .map(|p| {
            let status = statuses.iter().find(|s| s.profile.name == p.name);
            let built = status.and_then(|s| s.built.as_ref());
            let packages = built
                .and_then(|b| b.get("packages"))
                .and_then(|v| v.as_object())
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                        .collect()
                })
                .unwrap_or_default();
            ProfileOut {
                name: p.name.clone(),
                description: p.description.clone(),
                languages: p.languages.clone(),
                image: p
                    .image(*p.languages.first().unwrap_or(&Language::Python))
                    .to_string(),
                image_digest: status.and_then(|s| s.image_digest.clone()),
                available: status.is_some_and(|s| s.available),
                python_version: built
                    .and_then(|b| b.get("python_version"))
                    .and_then(|v| v.as_str())
                    .map(String::from),
                packages,
                preimport: p.preimport.clone(),
                plots: p.plots,
                pool_size: p.pool_size,
                pool_ready: status.map_or(0, |s| s.pool_ready),
            }
        })
        .collect();
    axum::Json(ProfilesOut {
        default: state.profiles.default_profile().name.clone(),
        profiles,
    })
}
