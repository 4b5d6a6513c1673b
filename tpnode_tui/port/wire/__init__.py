"""The port's JSON: the snapshot document and every answer a node sends, each written and read back strictly."""
