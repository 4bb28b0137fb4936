"""Transport security and credentials of the collector: dev PKI, device tokens, admin auth."""
