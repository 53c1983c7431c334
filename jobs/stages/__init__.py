"""The stages of the build: read and chunk (CPU tasks), embed (actor pool), per-topic reduce."""
