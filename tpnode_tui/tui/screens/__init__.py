"""The dashboard's screens: the main screen (``main``) and the dialogs it opens (``dialogs``)."""
