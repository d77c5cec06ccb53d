"""Deployment files (compose, Dockerfile, Makefile, README commands), checked offline and on a fresh clone."""
