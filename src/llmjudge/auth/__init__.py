"""Access control: users and roles, API tokens, browser sessions, CSRF, security headers."""
