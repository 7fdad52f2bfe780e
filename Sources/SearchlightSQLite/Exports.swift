// An app imports SearchlightSQLite alone: the SDK's types (SearchableIndex, AttributeSet,
// SearchQuery, IndexExtension …) come with it.
@_exported import SearchlightKit
