"""The evidence document, its atomic store, the environment allow-list, JUnit and merging."""
