// StateServer client (placeholder)
