"""Torch-free rules per family: probe results in, figures and culprits out."""
