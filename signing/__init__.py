"""sealift."""
