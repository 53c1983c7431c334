"""Per-topic index building (stripes, keywords, SimHash, HAL index.json, tables), consumers."""

from indexing.build import (
    IndexSettings,
    SourceInput,
    TopicInput,
    TopicOutput,
    build_topic,
    prompt_entries_from_index,
)
from indexing.hal import directory_index, set_child_topics
from indexing.keywords import Keyword, parse_keywords
from indexing.lifecycle import orphaned_topic_files, stale_files
from indexing.paths import chunk_table_path, document_table_path, topic_slug
from indexing.questions import parse_questions
from indexing.simhash import hamming, simhash64
from indexing.simhash_tables import SimhashMatch, build_simhash_tables, lookup_simhash
from indexing.sources import group_sources, index_tree, nearest_keywords_path
from indexing.stripes import stripe_factor
from indexing.tables import chunk_table_schema, document_table_schema
from indexing.topic_spec import without_section as topic_spec_without_section

# Bump whenever the same chunks, vectors and settings can index differently (a fix that changes
# index.json, the tables, topic-spec.md or the SimHash tables): builds include it in their settings
# key, so the next build rebuilds every topic instead of keeping those the older code wrote.
REVISION = 4

__all__ = [
    "REVISION",
    "IndexSettings",
    "Keyword",
    "SimhashMatch",
    "SourceInput",
    "TopicInput",
    "TopicOutput",
    "build_simhash_tables",
    "build_topic",
    "chunk_table_path",
    "chunk_table_schema",
    "directory_index",
    "document_table_path",
    "document_table_schema",
    "group_sources",
    "hamming",
    "index_tree",
    "lookup_simhash",
    "nearest_keywords_path",
    "orphaned_topic_files",
    "parse_keywords",
    "parse_questions",
    "prompt_entries_from_index",
    "set_child_topics",
    "simhash64",
    "stale_files",
    "stripe_factor",
    "topic_slug",
    "topic_spec_without_section",
]
