"""The QuorumController: the active controller turns admin and broker requests into metadata
records, validated against its working image and answered once they commit.

Each request type has a pure handler (image + request -> records + response) in a module
named for its concept; quorum_controller.py owns leadership, proposals and timers.
"""
