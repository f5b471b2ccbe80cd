"""Private helpers of safehub; nothing here is a stable API."""
