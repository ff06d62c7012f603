/* SPDX-License-Identifier: MIT */
/*
 * perf_mpi.h - gradwire-perf's bootstrap through MPI (tools/perf/perf_mpi.c,
 * built when meson finds MPI: option mpi). Private to gradwire-perf.
 */
#ifndef GW_PERF_MPI_H
#define GW_PERF_MPI_H

#include <stdbool.h>
#include "transport.h"

/**
 * gw_perf_mpi_launched() - whether an MPI launcher started this process
 * (mpirun's OMPI_COMM_WORLD_SIZE, PMIx's PMIX_RANK, MPICH's PMI_RANK).
 */
bool gw_perf_mpi_launched(void);

/**
 * gw_perf_mpi_init() - MPI_Init, then this process's rank and the job's size.
 * Return: 0, or -EIO when MPI refused (it printed why).
 */
int gw_perf_mpi_init(int *rank, int *size);

/** gw_perf_mpi_finalize() - MPI_Finalize, once every rank is done. */
void gw_perf_mpi_finalize(void);

/**
 * gw_perf_mpi_store_create() - a rendezvous store over MPI: set() sends the
 * key and value to every other rank, get() receives what arrived until the
 * key is there or timeout_ms passed. Every rank creates it (collective: it
 * duplicates MPI_COMM_WORLD). Return: 0, -ENOMEM or -EIO.
 */
int gw_perf_mpi_store_create(struct gw_store **out);

#endif
