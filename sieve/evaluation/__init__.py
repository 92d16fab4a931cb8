"""Evaluation: metrics (:mod:`.metrics`), the defenses × attacks runner (:mod:`.runner`),
clean-only calibration (:mod:`.calibrate`), live threshold trade-offs (:mod:`.tradeoffs`),
generation + answer cache (:mod:`.answers`) and reports (:mod:`.report`).

Sub-modules are imported on use; this package import stays light.
"""
