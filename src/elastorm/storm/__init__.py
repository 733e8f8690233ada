"""storm"""
