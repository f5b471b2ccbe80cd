"""What safehub keeps: the content-addressed cache of verified trees (shareable), the
user's own records (consent, verifications, pins), and the lockfile."""
