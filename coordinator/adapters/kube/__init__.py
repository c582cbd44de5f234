"""Everything that talks to the API server: reflector, writer, leases, TokenReview, watches."""
