"""The post: what the node tells each account, on its terminals and at its URLs (Apprise, sent as the account)."""
