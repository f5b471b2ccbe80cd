"""Checking what arrived without trusting it: the archive against the commit's tree
(git's own rules, ``.gitattributes`` included), and signatures."""
