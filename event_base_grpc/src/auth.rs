//! Bearer tokens with two scopes: [`Scope::Read`] (status, lists, metrics, watch, reflection)
//! and [`Scope::Admin`] (everything). A caller sends `authorization: Bearer <token>`; the
//! token is compared with each configured one in constant time, as SHA-256 digests: the time
//! taken depends on neither the content nor the length of a configured token.
//!
//! Authentication happens once per call, in an interceptor ([`Authenticator`]) in front of the
//! admin and reflection services: a missing or unknown token is `UNAUTHENTICATED`. The scope
//! found is put into the request's extensions, and each RPC checks it
//! (`require`): a read token on an admin RPC is `PERMISSION_DENIED`. The health service is
//! never gated.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tonic::{Request, Status};

/// What a caller may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Status, topics, workers, metrics, WAL stats, dead letters (read only), audit, watch.
    Read,
    /// Everything: publish, replay, purge, scaling, shutdown, and all of `Read`.
    Admin,
}

impl Scope {
    /// The scope's name: `read` or `admin`.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Admin => "admin",
        }
    }
}

/// The tokens a server accepts. With neither set, the server is open: every caller is
/// admin, and the server refuses to listen on anything but loopback unless told
/// [`allow_unauthenticated`](crate::GrpcServerBuilder::allow_unauthenticated).
///
/// Only the SHA-256 digest of each token is kept.
///
/// ```
/// use event_base_grpc::Tokens;
/// let tokens = Tokens::new().read("dashboards-only").admin("operators");
/// assert!(!tokens.is_open());
/// ```
#[derive(Clone, Default)]
pub struct Tokens {
    read: Option<TokenDigest>,
    admin: Option<TokenDigest>,
}

/// The SHA-256 digest of a token: what is kept and compared, always 32 bytes.
type TokenDigest = [u8; 32];

fn digest(token: &[u8]) -> TokenDigest {
    Sha256::digest(token).into()
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the tokens themselves.
        f.debug_struct("Tokens")
            .field("read", &self.read.as_ref().map(|_| "<set>"))
            .field("admin", &self.admin.as_ref().map(|_| "<set>"))
            .finish()
    }
}

impl Tokens {
    /// No tokens: every caller is admin (a server listens on loopback only then).
    pub fn new() -> Self {
        Tokens::default()
    }

    /// The token that grants [`Scope::Read`].
    pub fn read(mut self, token: impl Into<String>) -> Self {
        self.read = Some(digest(token.into().as_bytes()));
        self
    }

    /// The token that grants [`Scope::Admin`].
    pub fn admin(mut self, token: impl Into<String>) -> Self {
        self.admin = Some(digest(token.into().as_bytes()));
        self
    }

    /// Whether no token is set (every caller is admin).
    pub fn is_open(&self) -> bool {
        self.read.is_none() && self.admin.is_none()
    }

    /// The scope `token` grants, if any. The token's SHA-256 digest is compared with the
    /// digest of both tokens, each in constant time over 32 bytes: the time taken tells
    /// neither which one nearly matched nor how long either is.
    pub fn scope_of(&self, token: &[u8]) -> Option<Scope> {
        let given = digest(token);
        let matches = |t: &Option<TokenDigest>| -> bool {
            t.as_ref().is_some_and(|t| bool::from(t.ct_eq(&given)))
        };
        let admin = matches(&self.admin);
        let read = matches(&self.read);
        if admin {
            Some(Scope::Admin)
        } else if read {
            Some(Scope::Read)
        } else {
            None
        }
    }

    /// The scope granted by an `authorization` header value (`None`: no header). Shared by
    /// the gRPC interceptor and the HTTP endpoints, so both apply the same rules: an open
    /// server makes every caller admin; otherwise the value must be `Bearer <token>` (or
    /// `bearer <token>`) with a token [`scope_of`](Self::scope_of) knows.
    pub(crate) fn scope_of_header(&self, value: Option<&[u8]>) -> Result<Scope, AuthFailure> {
        if self.is_open() {
            return Ok(Scope::Admin);
        }
        let value = value.ok_or(AuthFailure::Missing)?;
        let token = value
            .strip_prefix(b"Bearer ")
            .or_else(|| value.strip_prefix(b"bearer "))
            .ok_or(AuthFailure::NotBearer)?;
        self.scope_of(token).ok_or(AuthFailure::Unknown)
    }

    /// The scope of a request's `authorization` metadata.
    fn authenticate(&self, metadata: &tonic::metadata::MetadataMap) -> Result<Scope, Status> {
        let value = metadata.get("authorization").map(|v| v.as_bytes());
        self.scope_of_header(value).map_err(|failure| {
            Status::unauthenticated(match failure {
                AuthFailure::Missing => {
                    "this server needs a token: send `authorization: Bearer <token>` \
                     (ebctl: --token or EBCTL_TOKEN)"
                }
                AuthFailure::NotBearer => {
                    "the authorization header is not `Bearer <token>`; send the token as a bearer token"
                }
                AuthFailure::Unknown => {
                    "the token is not one this server accepts; check --token / EBCTL_TOKEN"
                }
            })
        })
    }
}

/// Why a caller was not authenticated: each transport words its own answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AuthFailure {
    /// No `authorization` header.
    Missing,
    /// A header that is not `Bearer <token>`.
    NotBearer,
    /// A bearer token the server does not know.
    Unknown,
}

/// The interceptor in front of the gated services: authenticates the call and records its
/// [`Scope`] in the request's extensions.
#[derive(Debug, Clone)]
pub struct Authenticator {
    tokens: Tokens,
}

impl Authenticator {
    /// An interceptor for `tokens`.
    pub fn new(tokens: Tokens) -> Self {
        Authenticator { tokens }
    }
}

impl tonic::service::Interceptor for Authenticator {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let scope = self.tokens.authenticate(request.metadata())?;
        request.extensions_mut().insert(scope);
        Ok(request)
    }
}

/// Checks that the caller of `request` has `needed`; `rpc` names the call in the error.
pub(crate) fn require<T>(request: &Request<T>, needed: Scope, rpc: &str) -> Result<(), Status> {
    match request.extensions().get::<Scope>() {
        Some(have) if *have >= needed => Ok(()),
        Some(have) => Err(Status::permission_denied(format!(
            "{rpc} needs the {} scope; this token has {} only: use the admin token",
            needed.name(),
            have.name()
        ))),
        None => Err(Status::unauthenticated(format!(
            "{rpc}: the call was not authenticated; send `authorization: Bearer <token>`"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_by_token() {
        let t = Tokens::new().read("r-token").admin("a-token");
        assert_eq!(t.scope_of(b"a-token"), Some(Scope::Admin));
        assert_eq!(t.scope_of(b"r-token"), Some(Scope::Read));
        assert_eq!(t.scope_of(b"a-toke"), None);
        assert_eq!(t.scope_of(b""), None);
        assert!(!format!("{t:?}").contains("a-token"), "Debug hides tokens");
    }

    #[test]
    fn tokens_are_kept_as_fixed_length_digests() {
        // A prefix, an extension and a token of another length are all refused, and what is
        // compared has the same length whatever the token's: nothing depends on its length.
        let t = Tokens::new().admin("a-token");
        for wrong in [&b"a-toke"[..], b"a-token-", b"a", &[b'x'; 4096]] {
            assert_eq!(t.scope_of(wrong), None, "{wrong:?}");
        }
        assert_eq!(digest(b"a").len(), digest(&[b'x'; 4096]).len());
        assert_eq!(t.admin, Some(digest(b"a-token")));
    }
}
