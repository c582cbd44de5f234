"""Authentication of the API and the agent stream: TokenReview identity, access, middleware."""
