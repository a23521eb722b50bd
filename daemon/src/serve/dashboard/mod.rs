//! The web dashboard: its page, stylesheet and scripts, built into the
//! binary and served on the TLS listener at `/` and `/assets/`. The page
//! talks to the daemon only through the public API (grpc-web, with the
//! caller's bearer token); nothing here reads daemon state.
use axum::http::{header, HeaderName};
use axum::routing::get;

/// One file of the dashboard.
struct Asset {
    /// Where it is served.
    path: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const ASSETS: &[Asset] = &[
    Asset {
        path: "/",
        content_type: "text/html; charset=utf-8",
        body: include_str!("index.html"),
    },
    Asset {
        path: "/assets/app.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("app.css"),
    },
    Asset {
        path: "/assets/icon.svg",
        content_type: "image/svg+xml",
        body: include_str!("icon.svg"),
    },
    Asset {
        path: "/assets/app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("app.js"),
    },
    Asset {
        path: "/assets/api.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("api.js"),
    },
    Asset {
        path: "/assets/proto.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("proto.js"),
    },
    Asset {
        path: "/assets/flame.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("flame.js"),
    },
];

/// The page loads only its own files and calls only its own origin; no
/// inline script or style, no framing.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The dashboard's routes, for the TLS listener's router.
pub fn router() -> axum::Router {
    ASSETS.iter().fold(axum::Router::new(), |router, asset| {
        let headers = [
            (header::CONTENT_TYPE, asset.content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (
                HeaderName::from_static("cross-origin-opener-policy"),
                "same-origin",
            ),
        ];
        let body = asset.body;
        router.route(asset.path, get(move || async move { (headers, body) }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file the page and the scripts load is served.
    #[test]
    fn every_reference_is_served() {
        let served = |path: &str| ASSETS.iter().any(|a| a.path == path);
        let mut seen = 0;
        for asset in ASSETS {
            for quote in ["\"", "'"] {
                for (i, _) in asset.body.match_indices(&format!("{quote}/assets/")) {
                    let rest = &asset.body[i + 1..];
                    let path = &rest[..rest.find(quote).unwrap()];
                    assert!(served(path), "{} refers to {path}", asset.path);
                    seen += 1;
                }
                for (i, _) in asset.body.match_indices(&format!("from {quote}./")) {
                    let rest = &asset.body[i + 6 + 2..];
                    let file = &rest[..rest.find(quote).unwrap()];
                    let path = format!("/assets/{file}");
                    assert!(served(&path), "{} imports {path}", asset.path);
                    seen += 1;
                }
            }
        }
        assert!(seen >= 5, "only {seen} references found");
    }

    /// The page needs no file from elsewhere.
    #[test]
    fn nothing_is_loaded_from_another_origin() {
        for asset in ASSETS {
            for needle in ["http://", "https://", "//cdn", "@import"] {
                let allowed = asset.body.matches("http://www.w3.org/2000/svg").count();
                let found = asset.body.matches(needle).count();
                let found = if needle == "http://" {
                    found - allowed
                } else {
                    found
                };
                assert_eq!(found, 0, "{} holds {needle}", asset.path);
            }
        }
    }
}
