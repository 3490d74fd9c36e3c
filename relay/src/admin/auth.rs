//! The admin interceptor: authenticates an admin token and hands the
//! Admin methods its principal. Which token may do what is `access.rs`;
//! the secrets themselves are `secret.rs`.

use std::sync::Arc;

use tonic::{Request, Status};

use crate::access::Tokens;
use crate::error::Refusal;

/// The admin API's gatekeeper: requires `authorization: Bearer <token>`
/// of a known token and hands the methods its
/// [`Principal`](crate::access::Principal).
#[derive(Clone, Debug)]
pub(crate) struct AdminAuth {
    /// The token registry.
    pub tokens: Arc<Tokens>,
}

impl tonic::service::Interceptor for AdminAuth {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        let token = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| {
                Status::from(Refusal::Unauthenticated(
                    "admin token required: send `authorization: Bearer <token>`",
                ))
            })?;
        let principal = self
            .tokens
            .authenticate(token.trim())
            .ok_or_else(|| Status::from(Refusal::Unauthenticated("admin token is not valid")))?;
        req.extensions_mut().insert(principal);
        Ok(req)
    }
}
