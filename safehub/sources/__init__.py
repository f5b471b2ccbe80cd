"""Where code comes from: the one HTTPS transport, and the sources of commits, trees and
archives behind one protocol (GitHub's REST API and archive URLs, or a mirror that speaks
them)."""
